"""Bad input gets a clear error, or a documented fallback; never a silently wrong result."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stablejit import stable_jit


def test_builtins_and_library_functions_without_python_code_are_jitted():
    np.testing.assert_array_equal(stable_jit(abs)(-jnp.ones(2)), [1.0, 1.0])
    np.testing.assert_array_equal(stable_jit(jnp.sin)(jnp.zeros(1)), [0.0])
    np.testing.assert_array_equal(stable_jit(jax.nn.relu)(-jnp.ones(1)), [0.0])


def test_a_builtin_that_needs_a_concrete_value_fails_as_under_jax_jit():
    import math

    with pytest.raises(jax.errors.ConcretizationTypeError):
        stable_jit(math.sqrt)(jnp.ones(()))


def test_an_unhashable_static_argument_is_keyed_by_value_and_mutation_is_seen(traces):
    # jax.jit refuses it ("Non-hashable static arguments"); stable_jit keys
    # static arguments by structure, like closure contents (documented).
    def f(x, s):
        traces()
        return x * len(s)

    g = stable_jit(f, static_argnums=1)
    s = [1, 2]
    np.testing.assert_array_equal(g(jnp.ones(1), s), [2.0])
    np.testing.assert_array_equal(g(jnp.ones(1), [1, 2]), [2.0])
    s.append(3)
    np.testing.assert_array_equal(g(jnp.ones(1), s), [3.0])
    assert traces.n == 2


def test_a_static_argnum_past_the_arguments_is_reported_by_jax():
    with pytest.raises((ValueError, IndexError, TypeError)):
        stable_jit(lambda x: x, static_argnums=3)(jnp.ones(1))


def test_recursive_structures_in_a_closure_are_keyed_and_seen():
    tree = {"w": 2.0}
    tree["self"] = tree
    f = stable_jit(lambda x: x * tree["self"]["self"]["w"])
    np.testing.assert_array_equal(f(jnp.ones(1)), [2.0])
    tree["w"] = 3.0
    np.testing.assert_array_equal(f(jnp.ones(1)), [3.0])


def test_closed_over_object_whose_eq_raises_and_whose_state_cannot_be_pickled():
    class Weird:
        __slots__ = ("k",)

        def __init__(self, k):
            self.k = k

        def __eq__(self, other):
            raise RuntimeError("no")

        __hash__ = None

        def __reduce__(self):
            raise TypeError("no pickling")

    w = Weird(2.0)
    f = stable_jit(lambda x: x * w.k)
    np.testing.assert_array_equal(f(jnp.ones(1)), [2.0])
    w.k = 5.0  # slots are read, so the change is seen
    np.testing.assert_array_equal(f(jnp.ones(1)), [5.0])


def test_a_traced_function_raising_propagates_the_users_error():
    def f(x):
        raise KeyError("missing parameter 'w'")

    with pytest.raises(KeyError, match="missing parameter"):
        stable_jit(f)(jnp.ones(1))


def test_python_control_flow_on_a_lifted_array_is_jaxs_concretization_error():
    w = jnp.ones(2)

    def f(x):
        if w.sum() > 0:  # w is lifted, so it is a tracer here
            return x
        return -x

    with pytest.raises(jax.errors.TracerBoolConversionError):
        stable_jit(f)(jnp.ones(2))


class _Holder:
    def __init__(self):
        self.w = jnp.ones(2)
        self.calls = 0


@pytest.mark.parametrize("where", ["attribute", "dict item", "list item"])
def test_a_traced_update_of_a_lifted_array_is_dropped_and_named_never_leaked(where, caplog):
    # Under jax.jit the tracer would leak into the object; here the object
    # keeps its array, as jax.jit's later (cached) calls behave, and a log
    # line names what was dropped.
    h, d, lst = _Holder(), {"w": jnp.ones(2)}, [jnp.ones(2)]

    def f(x):
        if where == "attribute":
            h.w = h.w + x
        elif where == "dict item":
            d["w"] = d["w"] + x
        else:
            lst[0] = lst[0] + x
        return x

    caplog.set_level(logging.INFO, logger="stablejit")
    np.testing.assert_array_equal(stable_jit(f)(jnp.ones(2)), [1.0, 1.0])
    for kept in (h.w, d["w"], lst[0]):
        assert not isinstance(kept, jax.core.Tracer)
        np.testing.assert_array_equal(kept, [1.0, 1.0])
    named = {"attribute": "'w'", "dict item": "item 'w' of a dict", "list item": "item 0"}
    notices = [r.getMessage() for r in caplog.records if r.name == "stablejit"]
    assert any(named[where] in m and "dropped" in m for m in notices)


def test_the_traced_function_sees_the_programs_own_objects(traces):
    # Libraries keep state in objects the traced code finds by identity
    # (numpyro's handler stack): they must be the program's, not copies.
    stack = []
    handler = _Holder()

    def f(x):
        traces()
        stack.append(handler)  # pushed and popped, as effect handlers do
        try:
            assert stack[-1] is handler and handler.w is not None
            handler.calls += 1  # a Python write: reaches the program's object
            return x * stack[-1].w
        finally:
            stack.pop()

    np.testing.assert_array_equal(stable_jit(f)(jnp.full(2, 3.0)), [3.0, 3.0])
    assert handler.calls == 1 and stack == []
    handler.w = jnp.ones(2) * 2.0  # lifted: no retrace
    np.testing.assert_array_equal(stable_jit(f)(jnp.full(2, 3.0)), [6.0, 6.0])
    assert traces.n == 1


def test_other_writes_while_traced_are_allowed(traces):
    h = _Holder()

    def f(x):
        traces()
        h.calls += 1  # on stablejit's copy of h: jax.jit would write it to h itself
        return x * h.w

    np.testing.assert_array_equal(stable_jit(f)(jnp.ones(2)), [1.0, 1.0])
    assert traces.n == 1


def test_an_unreadable_unpicklable_object_is_keyed_by_identity_with_a_log_not_a_warning(caplog):
    import threading
    import warnings

    lock = threading.RLock()  # no __dict__, no slots, cannot be pickled
    scale = {"k": 2.0}

    def f(x):
        with lock:
            return x * scale["k"]

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as suites run with -W error
        np.testing.assert_array_equal(stable_jit(f)(jnp.ones(1)), [2.0])
        scale["k"] = 3.0
        np.testing.assert_array_equal(stable_jit(f)(jnp.ones(1)), [3.0])
    notices = [r.getMessage() for r in caplog.records if r.name == "stablejit"]
    assert len(notices) == 1 and "RLock" in notices[0] and "identity" in notices[0]


class _Node:
    """Keys that cannot be sorted, as graph libraries' node ids."""

    def __init__(self, i):
        self.i = i


class _SortedMap:
    """A mapping registered as a pytree whose flatten sorts its keys, as
    flax's FrozenDict and JAX's dict flattening do."""

    def __init__(self, items):
        self.items = dict(items)


jax.tree_util.register_pytree_node(
    _SortedMap,
    lambda m: ([m.items[k] for k in sorted(m.items)], sorted(m.items)),
    lambda keys, values: _SortedMap(zip(keys, values, strict=True)),
)


def test_a_pytree_node_that_cannot_be_flattened_is_keyed_as_a_plain_object():
    # Cells are walked in name order: the class is seen as a pytree first.
    first = _SortedMap({"a": 1.0})  # sortable keys: flattens
    second = _SortedMap({_Node(1): 2.0, _Node(2): 3.0})  # the flatten raises
    f = stable_jit(lambda x: x * first.items["a"] + sum(second.items.values()))
    np.testing.assert_array_equal(f(jnp.ones(1)), [6.0])
    second.items[next(iter(second.items))] = 10.0  # keyed by its state: never stale
    np.testing.assert_array_equal(f(jnp.ones(1)), [14.0])


def test_a_structure_deeper_than_the_recursion_limit_runs_as_plain_jax_jit(caplog):
    import sys

    deep = (1.0,)
    for _ in range(sys.getrecursionlimit()):
        deep = (deep,)

    def f(x):
        return x * 2.0 if deep else x

    for _ in range(2):
        np.testing.assert_array_equal(stable_jit(f)(jnp.ones(1)), [2.0])
    notices = [r.getMessage() for r in caplog.records if r.name == "stablejit"]
    assert len(notices) == 1 and "cannot be keyed" in notices[0]


class _LazyParent:
    """An object whose child, when flattened, sets up state on the parent
    (as libraries do lazily): the parent's __dict__ changes mid-walk."""

    def __init__(self):
        self.child = _LazyChild(self)
        self.w = jnp.ones(1)


class _LazyChild:
    def __init__(self, parent):
        self.parent = parent


jax.tree_util.register_pytree_node(
    _LazyChild,
    lambda c: (c.parent.__dict__.setdefault("ready", [c.parent.w]) and [], None),
    lambda aux, kids: _LazyChild(None),
)


def test_a_dict_that_changes_while_walked_is_walked_again():
    p = _LazyParent()
    f = stable_jit(lambda x: x + p.w)
    np.testing.assert_array_equal(f(jnp.ones(1)), [2.0])
    np.testing.assert_array_equal(f(jnp.ones(1)), [2.0])


class _Restless:
    """A pytree node whose flattening files one more entry in the registry
    that holds it: the registry changes on every walk, never settling."""

    def __init__(self, registry, w):
        self.registry, self.w = registry, w


jax.tree_util.register_pytree_node(
    _Restless,
    lambda r: (r.registry.setdefault(len(r.registry), None) or [r.w], r.registry),
    lambda registry, kids: _Restless(registry, *kids),
)


def test_a_dict_that_changes_on_every_walk_runs_as_plain_jax_jit(caplog):
    registry = {}
    registry["node"] = _Restless(registry, jnp.full(1, 3.0))
    f = stable_jit(lambda x: x * registry["node"].w)
    for _ in range(2):
        np.testing.assert_array_equal(f(jnp.ones(1)), [3.0])
    notices = [r.getMessage() for r in caplog.records if r.name == "stablejit"]
    assert len(notices) == 1 and "cannot be keyed" in notices[0]
