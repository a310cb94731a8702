"""Everything that can change a trace is seen; jax.jit misses each of these."""

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stablejit import stable_jit

SCALE = 2.0
OFFSETS = {"a": 1.0}


def scaled(x):
    return x * SCALE


def test_rebinding_a_global_is_seen():
    global SCALE
    f = stable_jit(scaled)
    try:
        np.testing.assert_array_equal(f(jnp.ones(2)), [2.0, 2.0])
        SCALE = 5.0
        np.testing.assert_array_equal(f(jnp.ones(2)), [5.0, 5.0])
    finally:
        SCALE = 2.0
    np.testing.assert_array_equal(f(jnp.ones(2)), [2.0, 2.0])


def test_rebinding_a_global_function_is_seen():
    ns = {}
    exec("def helper(x):\n    return x + 1\ndef f(x):\n    return helper(x) * 2\n", ns)
    f = stable_jit(ns["f"])
    np.testing.assert_array_equal(f(jnp.zeros(1)), [2.0])
    exec("def helper(x):\n    return x - 1\n", ns)
    np.testing.assert_array_equal(f(jnp.zeros(1)), [-2.0])


def test_global_read_only_by_a_nested_function_is_keyed():
    ns = {"K": 3}
    exec("def f(x):\n    g = lambda y: y * K\n    return g(x)\n", ns)
    f = stable_jit(ns["f"])
    np.testing.assert_array_equal(f(jnp.ones(1)), [3.0])
    ns["K"] = 4
    np.testing.assert_array_equal(f(jnp.ones(1)), [4.0])


def test_rebinding_a_closed_over_variable_is_seen():
    k = 1

    def f(x):
        return x * k

    g = stable_jit(f)
    np.testing.assert_array_equal(g(jnp.ones(2)), [1.0, 1.0])
    k = 7
    np.testing.assert_array_equal(g(jnp.ones(2)), [7.0, 7.0])
    k = jnp.full(2, 3.0)
    np.testing.assert_array_equal(g(jnp.ones(2)), [3.0, 3.0])


def test_mutating_a_closed_over_dict_is_seen():
    cfg = {"scale": 2}
    f = stable_jit(lambda x: x * cfg["scale"])
    np.testing.assert_array_equal(f(jnp.ones(1)), [2.0])
    cfg["scale"] = 3
    np.testing.assert_array_equal(f(jnp.ones(1)), [3.0])


def test_mutating_a_global_dict_is_seen():
    f = stable_jit(lambda x: x + OFFSETS["a"])
    try:
        np.testing.assert_array_equal(f(jnp.zeros(1)), [1.0])
        OFFSETS["a"] = -1.0
        np.testing.assert_array_equal(f(jnp.zeros(1)), [-1.0])
    finally:
        OFFSETS["a"] = 1.0


def test_mutating_a_closed_over_list_is_seen():
    layers = [1.0, 2.0]

    def f(x):
        for s in layers:
            x = x * s
        return x

    g = stable_jit(f)
    np.testing.assert_array_equal(g(jnp.ones(1)), [2.0])
    layers.append(10.0)
    np.testing.assert_array_equal(g(jnp.ones(1)), [20.0])


def test_mutating_a_closed_over_numpy_array_in_place_is_seen():
    w = np.ones(3, np.float32)
    f = stable_jit(lambda x: x * w)
    np.testing.assert_array_equal(f(jnp.ones(3)), np.ones(3))
    w[1] = 5.0
    np.testing.assert_array_equal(f(jnp.ones(3)), [1.0, 5.0, 1.0])


def test_mutating_an_attribute_of_a_closed_over_object_is_seen():
    class Cfg:
        def __init__(self):
            self.power = 2

    cfg = Cfg()
    f = stable_jit(lambda x: x**cfg.power)
    np.testing.assert_array_equal(f(jnp.full(1, 3.0)), [9.0])
    cfg.power = 3
    np.testing.assert_array_equal(f(jnp.full(1, 3.0)), [27.0])


def test_changing_a_default_is_seen():
    def f(x, k=2):
        return x * k

    g = stable_jit(f)
    np.testing.assert_array_equal(g(jnp.ones(1)), [2.0])
    f.__defaults__ = (5,)
    np.testing.assert_array_equal(g(jnp.ones(1)), [5.0])


def test_changing_a_kwdefault_is_seen():
    def f(x, *, k=2):
        return x * k

    g = stable_jit(f)
    np.testing.assert_array_equal(g(jnp.ones(1)), [2.0])
    f.__kwdefaults__ = {"k": 4}
    np.testing.assert_array_equal(g(jnp.ones(1)), [4.0])


def test_rebinding_an_attribute_of_a_user_module_is_seen():
    mod = types.ModuleType("user_config")
    mod.__file__ = __file__
    mod.FACTOR = 2.0
    ns = {"cfg": mod}
    exec("def f(x):\n    return x * cfg.FACTOR\n", ns)
    f = stable_jit(ns["f"])
    np.testing.assert_array_equal(f(jnp.ones(1)), [2.0])
    mod.FACTOR = 3.0
    np.testing.assert_array_equal(f(jnp.ones(1)), [3.0])


def test_replacing_the_code_of_a_function_is_seen():
    def f(x):
        return x + 1

    g = stable_jit(f)
    np.testing.assert_array_equal(g(jnp.zeros(1)), [1.0])
    f.__code__ = (lambda x: x + 2).__code__
    np.testing.assert_array_equal(g(jnp.zeros(1)), [2.0])


def _probe(k):
    # An array that tells the static values apart: dtype for 1/1.0/True/1j,
    # the sign of 1/k for -0.0, and the str's type for "1".
    if isinstance(k, str):
        return jnp.asarray(-1)
    if k == 0:
        return jnp.asarray(np.copysign(1.0, k))
    return jnp.asarray(k)


@pytest.mark.parametrize("a,b", [(1, 1.0), (1, True), (0.0, -0.0), ("1", 1), (1 + 0j, 1.0)])
def test_equal_but_different_scalars_trace_separately(a, b, traces):
    def make(k):
        def f(x):
            traces()
            return x + _probe(k)

        return stable_jit(f)

    make(a)(jnp.zeros(1))
    out = make(b)(jnp.zeros(1))
    expected = jnp.zeros(1) + _probe(b)
    assert traces.n == 2
    assert out.dtype == expected.dtype
    np.testing.assert_array_equal(out, expected)


def test_nan_constant_hits_itself(traces):
    def make():
        k = float("nan")

        def f(x):
            traces()
            return x + k

        return stable_jit(f)

    make()(jnp.zeros(1))
    assert np.isnan(make()(jnp.zeros(1))).all()
    assert traces.n == 1


def test_jax_jit_really_is_stale_here():
    """The bug we fix, pinned: if jax.jit stops being stale, revisit the docs."""
    cfg = {"scale": 2}
    f = jax.jit(lambda x: x * cfg["scale"])
    f(jnp.ones(1))
    cfg["scale"] = 3
    np.testing.assert_array_equal(f(jnp.ones(1)), [2.0])


def test_mutating_a_closed_over_counter_or_container_subclass_is_seen():
    import collections

    class Layers(list):
        pass

    counts = collections.Counter(steps=2)
    layers = Layers([1.0, 2.0])
    layers.scale = 1.0

    def f(x):
        for s in layers:
            x = x * s
        return x * counts["steps"] * layers.scale

    g = stable_jit(f)
    np.testing.assert_array_equal(g(jnp.ones(1)), [4.0])
    counts["steps"] = 3
    np.testing.assert_array_equal(g(jnp.ones(1)), [6.0])
    layers.append(jnp.full(1, 5.0))
    np.testing.assert_array_equal(g(jnp.ones(1)), [30.0])
    layers.scale = 0.5
    np.testing.assert_array_equal(g(jnp.ones(1)), [15.0])


def test_a_closed_over_value_switching_kind_between_calls_is_seen(traces):
    def outer(v):
        def inner(x):
            traces()
            return x + (sum(v) if isinstance(v, list) else v)

        return stable_jit(inner)(jnp.zeros(2))

    for v, expected in [
        (jnp.ones(2), 1.0),
        (jnp.ones(2) * 2, 2.0),
        (3, 3.0),
        (jnp.ones(2) * 4, 4.0),
        ([jnp.ones(2), jnp.ones(2)], 2.0),
        (5, 5.0),
        (np.full(2, 6.0, np.float32), 6.0),
    ]:
        np.testing.assert_array_equal(outer(v), [expected, expected])
    assert traces.n == 5  # array, 3, list of arrays, 5, a small numpy array (a constant)


def test_shadowing_a_builtin_with_a_global_is_seen():
    ns = {}
    exec("def f(x):\n    return x * abs(-2)\n", ns)
    f = stable_jit(ns["f"])
    np.testing.assert_array_equal(f(jnp.ones(1)), [2.0])
    np.testing.assert_array_equal(f(jnp.ones(1)), [2.0])
    ns["abs"] = lambda v: 10
    np.testing.assert_array_equal(f(jnp.ones(1)), [10.0])


def test_setting_a_function_attribute_is_seen():
    def f(x):
        return x * getattr(f, "scale", 1)

    g = stable_jit(f)
    np.testing.assert_array_equal(g(jnp.ones(1)), [1.0])
    np.testing.assert_array_equal(g(jnp.ones(1)), [1.0])
    f.scale = 4
    np.testing.assert_array_equal(g(jnp.ones(1)), [4.0])


def test_dict_insertion_order_is_keyed_because_iteration_sees_it():
    def outer(d):
        def inner(x):
            return jnp.stack([x * v for v in d.values()])

        return stable_jit(inner)(jnp.ones(()))

    np.testing.assert_array_equal(outer({"a": 1.0, "b": 2.0}), [1.0, 2.0])
    np.testing.assert_array_equal(outer({"b": 2.0, "a": 1.0}), [2.0, 1.0])
    w = {"a": jnp.ones(()), "b": jnp.ones(()) * 2}
    np.testing.assert_array_equal(outer(w), [1.0, 2.0])
    np.testing.assert_array_equal(outer({"b": w["b"], "a": w["a"]}), [2.0, 1.0])


def test_arrays_closed_over_in_pytree_metadata_are_lifted_not_baked(traces):
    import dataclasses

    if not hasattr(jax.tree_util.tree_structure(0), "from_node_data_and_children"):
        pytest.skip("rebuilding pytree metadata needs PyTreeDef.from_node_data_and_children")

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class State:
        w: jax.Array
        fn: object = dataclasses.field(metadata={"static": True})

    def scaler(a):
        def fn(x):
            traces()
            return x * a

        return fn

    for k in (2.0, 3.0, 4.0):
        s = State(jnp.ones(2), scaler(jnp.full(2, k)))
        f = stable_jit(lambda x, s=s: s.fn(x) + s.w)
        np.testing.assert_array_equal(f(jnp.ones(2)), [k + 1] * 2)
    assert traces.n == 1


def test_arrays_in_pytree_metadata_run_as_jax_jit_where_this_jax_cannot_rebuild_it(
    monkeypatch, caplog
):
    # A JAX before 0.7 has no PyTreeDef.from_node_data_and_children: the call runs
    # through a plain jax.jit (that variant's fallback), never raises.
    import dataclasses

    from stablejit._fingerprint import containers
    from stablejit._fingerprint.places import RebuildMismatch

    def old_jax(treedef, node_type, aux, v):
        raise RebuildMismatch("this JAX cannot rebuild a pytree's metadata")

    monkeypatch.setattr(containers, "_with_node_data", old_jax)

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class State:
        w: jax.Array
        fn: object = dataclasses.field(metadata={"static": True})

    a = jnp.full(2, 3.0)
    s = State(jnp.ones(2), lambda x: x * a)
    with caplog.at_level("INFO", logger="stablejit"):
        got = stable_jit(lambda x, s=s: s.fn(x) + s.w)(jnp.ones(2))
    np.testing.assert_array_equal(got, [4.0, 4.0])
    assert "cannot rebuild" in caplog.text


class _Tidy:
    """An object whose kind leaves an attribute out of its key (as a library kind does)."""

    def __init__(self, a, b):
        self.a, self.b, self.junk = a, b, object()


def test_objects_keyed_through_a_filtered_state_are_not_mistaken_for_each_other(traces):
    # A kind that skips attributes keys a filtered copy of the object's state;
    # the copy dies during the walk, and a later copy at its address must not
    # read as a back reference to it (which would drop its state from the key).
    from stablejit._fingerprint.classify import register_user_kind
    from stablejit._fingerprint.objects import Object

    register_user_kind(_Tidy, Object(_Tidy, skip=frozenset({"junk"})))
    try:

        def run(ms, x):
            def f(x):
                traces()
                return x * sum(m.a * m.b for m in ms)

            return stable_jit(f)(x)

        x = jnp.ones(2)
        np.testing.assert_allclose(run([_Tidy(1.0, 2.0), _Tidy(3.0, 4.0)], x), x * 14)
        np.testing.assert_allclose(run([_Tidy(1.0, 2.0), _Tidy(5.0, 7.0)], x), x * 37)
        assert traces.n == 2
    finally:
        register_user_kind(_Tidy, None)


@jax.tree_util.register_pytree_node_class
class _Scaled:
    """A pytree whose flatten makes its metadata anew each time, as a list."""

    def __init__(self, scale):
        self.scale = scale

    def tree_flatten(self):
        return (), [self.scale]

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(aux[0])


def test_values_a_pytree_flatten_makes_are_not_mistaken_for_earlier_ones(traces):
    # The metadata list of one node dies once its key is made; a later node's
    # list at the same address must be keyed by what it holds, not read as a
    # back reference to the first.
    def run(nodes, x):
        def f(x):
            traces()
            return x * sum(n.scale for n in nodes)

        return stable_jit(f)(x)

    x = jnp.ones(2)
    np.testing.assert_allclose(run([_Scaled(1.0), _Scaled(5.0), _Scaled(7.0)], x), x * 13)
    np.testing.assert_allclose(run([_Scaled(1.0), _Scaled(5.0), _Scaled(9.0)], x), x * 15)
    assert traces.n == 2


class _Scaled:
    def __init__(self, scale):
        self.scale = scale


def _reading_through(proxy):
    return stable_jit(lambda x: x * proxy.scale)


def test_a_weak_proxy_is_keyed_by_what_it_stands_for():
    import weakref

    a, b = _Scaled(2.0), _Scaled(5.0)
    x = jnp.ones(2)
    np.testing.assert_array_equal(_reading_through(weakref.proxy(a))(x), x * 2.0)
    # Another object, then the first one changed: both seen, where every proxy
    # once had one key (no __dict__ of its own to read).
    np.testing.assert_array_equal(_reading_through(weakref.proxy(b))(x), x * 5.0)
    a.scale = 3.0
    np.testing.assert_array_equal(_reading_through(weakref.proxy(a))(x), x * 3.0)


def test_arrays_behind_a_weak_proxy_are_lifted(traces):
    import weakref

    def run(holder):
        proxy = weakref.proxy(holder)

        def f(x):
            traces()
            return x * proxy.scale

        return stable_jit(f)(jnp.ones(2))

    for value in (3.0, 4.0):
        holder = _Scaled(jnp.full(2, value))
        stock = jax.jit(lambda x, s: x * s)(jnp.ones(2), holder.scale)
        np.testing.assert_array_equal(run(holder), stock)
    assert traces.n == 1  # the array is an input: one trace for both
