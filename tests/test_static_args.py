"""Static arguments are keyed by structure, like what a function closes over."""

import dataclasses
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import wraps_through

import stablejit
from stablejit import stable_jit


def _scaler(a):
    return lambda x: x * a


def test_a_fresh_callable_passed_as_a_static_argument_hits(traces):
    def apply(x, fn):
        traces()
        return fn(x) + 1

    g = stable_jit(apply, static_argnums=1)
    for _ in range(5):
        np.testing.assert_array_equal(g(jnp.ones(2), _scaler(3.0)), [4.0, 4.0])
    np.testing.assert_array_equal(g(jnp.ones(2), _scaler(5.0)), [6.0, 6.0])
    assert traces.n == 2


def test_arrays_closed_over_by_a_static_callable_are_lifted_not_baked(traces):
    def apply(x, fn):
        traces()
        return fn(x)

    g = stable_jit(apply, static_argnames="fn")
    for k in range(4):
        a = jnp.full(2, float(k))
        np.testing.assert_array_equal(g(jnp.ones(2), fn=_scaler(a)), [float(k)] * 2)
    assert traces.n == 1


@pytest.mark.parametrize("how", ["positional", "keyword"])
def test_static_argnames_and_argnums_resolve_both_ways_of_passing(traces, how):
    def apply(x, fn):
        traces()
        return fn(x)

    g = stable_jit(apply, static_argnames="fn")
    for _ in range(3):
        out = (
            g(jnp.ones(1), _scaler(2.0)) if how == "positional" else g(jnp.ones(1), fn=_scaler(2.0))
        )
        np.testing.assert_array_equal(out, [2.0])
    assert traces.n == 1


def test_a_static_argument_named_by_number_or_by_name_shares_one_program(traces):
    # jax.jit resolves static_argnums=1 to the name y and static_argnames="y"
    # to the number 1: one program per way of passing it, for both wrappers.
    def f(x, y):
        traces()
        return x * y

    by_number, by_name = stable_jit(f, static_argnums=1), stable_jit(f, static_argnames="y")
    for g in (by_number, by_name, by_number):
        np.testing.assert_allclose(g(jnp.arange(3.0), 2.0), [0.0, 2.0, 4.0])
        np.testing.assert_allclose(g(jnp.arange(3.0), y=3.0), [0.0, 3.0, 6.0])
    assert traces.n == 2
    # Told apart where they differ: no inference when both are given.
    explicit = stable_jit(f, static_argnums=1, static_argnames=())
    with pytest.raises(TypeError, match="not marked as static"):
        explicit(jnp.arange(3.0), y="not an array")
    np.testing.assert_allclose(by_number(jnp.arange(3.0), y="ab".count("a")), [0.0, 1.0, 2.0])
    assert traces.n == 3


def test_wrappers_sharing_one_code_resolve_static_arguments_by_their_own_signature():
    # jax.named_call and functools.wraps give every wrapped function one code
    # object; the signature, read through __wrapped__, is each one's own.
    first = stable_jit(wraps_through(lambda flag, y: y + 1.0 if flag else y), static_argnums=0)
    second = stable_jit(wraps_through(lambda switch, z: z * 2.0 if switch else z), static_argnums=0)
    assert float(first(True, 1.0)) == 2.0
    assert float(second(True, 3.0)) == 6.0
    assert float(second(switch=False, z=3.0)) == 3.0


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"static_argnums": (2, 0)}, {"static_argnums": (0, 2)}),
        ({"static_argnames": ("a", "c")}, {"static_argnames": ["c", "a", "c"]}),
    ],
)
def test_options_naming_one_set_of_arguments_in_any_order_share_one_program(traces, first, second):
    # jax.jit reads them as sets: its caches, keyed by the function, trace once.
    def f(a, b, c):
        traces()
        return a * b + c

    args = (2.0, jnp.arange(3.0), 1.0)
    expected = f(*args)
    for options in (first, second):
        np.testing.assert_allclose(stable_jit(f, **options)(*args), expected)
    assert traces.n == 2  # the eager reference, then one trace


@dataclasses.dataclass
class Config:
    depth: int
    scale: float


def test_a_static_object_mutated_in_place_retraces_where_jax_jit_would_go_stale(traces):
    def f(x, cfg):
        traces()
        return x * cfg.scale + cfg.depth

    g = stable_jit(f, static_argnums=1)
    cfg = Config(depth=1, scale=2.0)
    np.testing.assert_array_equal(g(jnp.ones(1), cfg), [3.0])
    cfg.scale = 3.0
    np.testing.assert_array_equal(g(jnp.ones(1), cfg), [4.0])
    np.testing.assert_array_equal(g(jnp.ones(1), Config(depth=1, scale=3.0)), [4.0])
    assert traces.n == 2


def test_static_values_of_different_types_do_not_share_a_trace(traces):
    def f(x, n):
        traces()
        return x * n

    g = stable_jit(f, static_argnums=1)
    assert g(jnp.ones(1), 1).dtype == jnp.float32
    assert g(jnp.ones(1), True).dtype == jnp.float32
    assert g(jnp.ones(1), 1.0).dtype == jnp.float32
    assert traces.n == 3


def test_static_arguments_are_not_kept_alive_by_the_cache():
    import gc
    import weakref

    class Fn:
        def __call__(self, x):
            return x + 1

    g = stable_jit(lambda x, fn: fn(x), static_argnums=1)
    fn = Fn()
    ref = weakref.ref(fn)
    np.testing.assert_array_equal(g(jnp.ones(1), fn), [2.0])
    del fn
    gc.collect()
    assert ref() is None


def test_a_wrapper_resolved_once_is_not_kept_alive_by_its_slots():
    import gc
    import weakref

    def scale(x, n):
        return x * n

    wrapper = wraps_through(scale)
    ref = weakref.ref(wrapper)
    g = stable_jit(wrapper, static_argnums=1)
    for n in (2, 2, 3):  # resolved once, on the first call, as jax.jit does when wrapping
        np.testing.assert_array_equal(g(jnp.ones(1), n), [float(n)])
    del g, wrapper
    gc.collect()
    assert ref() is None


def test_lower_and_compile_take_the_dynamic_arguments():
    g = stable_jit(lambda x, fn: fn(x), static_argnums=1)
    compiled = g.lower(jnp.ones(2), _scaler(jnp.full(2, 4.0))).compile()
    np.testing.assert_array_equal(compiled(jnp.ones(2)), [4.0, 4.0])


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class State:
    w: jax.Array
    step: int
    fn: object = dataclasses.field(metadata={"static": True})


def _train_step(state, x):
    _train_step.traces.append(1)
    return dataclasses.replace(state, w=state.w + state.fn(x), step=state.step + 1)


def test_a_fresh_callable_in_an_arguments_static_field_hits_after_one_repeat():
    # jax.jit compares it by identity and retraces per fresh closure; the
    # first such retrace switches stable_jit to comparing it by fingerprint,
    # and is made that way at once (no variant traced for the old way).
    _train_step.traces = []
    step = stable_jit(_train_step)
    w = jnp.zeros(2)
    for _ in range(5):
        state = State(w, 0, _scaler(2.0))
        for _ in range(2):
            state = step(state, jnp.ones(2))
        w = state.w
        assert state.step == 2
    np.testing.assert_array_equal(w, [20.0, 20.0])
    assert len(_train_step.traces) == 2
    # A different closure is a different structure: retraced, correct.
    out = step(State(w, 0, _scaler(1.0)), jnp.ones(2))
    np.testing.assert_array_equal(out.w, [21.0, 21.0])
    assert len(_train_step.traces) == 3


def test_the_same_callable_in_a_static_field_is_left_to_jax(traces):
    def f(state, x):
        traces()
        return state.fn(x) * state.w

    step = stable_jit(f)
    fn = _scaler(3.0)
    for k in range(4):
        np.testing.assert_array_equal(
            step(State(jnp.full(2, k), 0, fn), jnp.ones(2)), [3.0 * k] * 2
        )
    assert traces.n == 1


def test_flax_train_state_rebuilt_per_epoch_with_a_fresh_optimizer_hits():
    optax = pytest.importorskip("optax")
    nn = pytest.importorskip("flax.linen")
    from flax.training import train_state

    traces = []

    def train_step(state, x, y):
        traces.append(1)

        def loss(p):
            return ((state.apply_fn(p, x) - y) ** 2).mean()

        return state.apply_gradients(grads=jax.grad(loss)(state.params))

    x, y = jnp.ones((4, 3)), jnp.zeros((4, 2))
    params = nn.Dense(2).init(jax.random.key(0), x)
    ours, ref = params, params
    for _ in range(4):
        model = nn.Dense(2)
        s = train_state.TrainState.create(apply_fn=model.apply, params=ours, tx=optax.adam(1e-2))
        r = train_state.TrainState.create(apply_fn=model.apply, params=ref, tx=optax.adam(1e-2))
        for _ in range(2):
            s = stable_jit(train_step)(s, x, y)
            r = train_step(r, x, y)
        ours, ref = s.params, r.params
    n_eager = 8
    assert len(traces) - n_eager == 2
    for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)


class _Key:
    """A class written to be a cache key: its own __eq__ and __hash__, over
    part of its state (a weak reference to its subject is not compared)."""

    def __init__(self, subject, scale):
        import weakref

        self.ref = weakref.ref(subject)
        self.scale = scale

    def __eq__(self, other):
        return isinstance(other, _Key) and self.scale == other.scale

    def __hash__(self):
        return hash(self.scale)


class _Subject:
    pass


def test_a_static_argument_of_a_class_written_to_be_a_key_is_keyed_by_its_equality(traces):
    def apply(x, key):
        traces()
        return x * key.scale

    g = stable_jit(apply, static_argnums=1)
    subjects = [_Subject() for _ in range(3)]
    for s in subjects:  # a new key object, with a new weak reference, each call
        np.testing.assert_array_equal(g(jnp.ones(1), _Key(s, 2.0)), [2.0])
    assert traces.n == 1  # as jax.jit: equal keys hit
    np.testing.assert_array_equal(g(jnp.ones(1), _Key(subjects[0], 3.0)), [3.0])
    assert traces.n == 2  # unequal keys retrace


def test_a_dataclass_generated_equality_is_still_keyed_by_structure(traces):
    @dataclasses.dataclass(frozen=True)
    class Config:
        fn: object

    def apply(x, cfg):
        traces()
        return cfg.fn(x)

    g = stable_jit(apply, static_argnums=1)
    for _ in range(3):  # fresh, structurally equal callables: generated __eq__ would miss
        np.testing.assert_array_equal(g(jnp.ones(1), Config(_scaler(2.0))), [2.0])
    assert traces.n == 1


def test_the_switch_to_arguments_by_structure_also_serves_functions_with_static_arguments():
    traces = []

    def step(state, x, scale):
        traces.append(1)
        return dataclasses.replace(state, w=state.w + scale * state.fn(x), step=state.step + 1)

    jitted = stable_jit(step, static_argnums=2)
    w = jnp.zeros(2)
    for _ in range(4):
        state = State(w, 0, _scaler(2.0))
        for _ in range(2):
            state = jitted(state, jnp.ones(2), 3)
        w = state.w
    np.testing.assert_array_equal(w, [48.0, 48.0])
    assert len(traces) == 2  # the first state, then the retrace that switched, made by structure


def _node_class():
    """A pytree node class defined locally that cloudpickle cannot pickle by
    value (a lock among its class attributes), as an equinox Module's class."""

    @jax.tree_util.register_pytree_node_class
    class Node:
        lock = threading.Lock()

        def __init__(self, scale, offset):
            self.scale, self.offset = scale, offset

        def __call__(self, x):
            return x * self.scale + self.offset

        def tree_flatten(self):
            return (self.scale,), self.offset

        @classmethod
        def tree_unflatten(cls, offset, children):
            return cls(children[0], offset)

    return Node


def test_a_pytree_structure_as_a_static_argument_is_keyed_by_its_nodes(traces):
    # What equinox's filter_jit does: the structure static, the leaves traced,
    # both flattened afresh for each call.
    def apply(leaves, structure, x):
        traces()
        return jax.tree_util.tree_unflatten(structure, leaves)(x)

    Node = _node_class()
    stock = jax.jit(apply, static_argnums=1)
    ours = stable_jit(apply, static_argnums=1)
    x = jnp.ones(2)
    for offset in (1.0, 1.0, 2.0, 2.0):
        leaves, structure = jax.tree_util.tree_flatten(Node(jnp.float32(3.0), offset))
        expected = stock(leaves, structure, x)
        np.testing.assert_array_equal(ours(leaves, structure, x), expected)
        np.testing.assert_array_equal(expected, x * 3.0 + offset)
    # Once per offset for each, as stock: equal structures, not the same object.
    assert traces.n == 4


def _method_holder():
    """A node whose metadata holds a function that counts its traces, as
    equinox's filter_jit of a bound method holds the method."""
    calls = 0

    def method(x):
        nonlocal calls
        calls += 1  # a trace counter: left out of the key where the walk meets it
        return x + 1

    return method


def test_a_trace_counter_in_a_structures_metadata_does_not_retrace(traces):
    def apply(leaves, structure, x):
        traces()
        (fn,) = jax.tree_util.tree_unflatten(structure, leaves)
        return fn(x)

    ours = stable_jit(apply, static_argnums=1)
    method = _method_holder()
    for _ in range(3):
        leaves, structure = jax.tree_util.tree_flatten((jax.tree_util.Partial(method),))
        np.testing.assert_array_equal(ours(leaves, structure, jnp.ones(2)), [2.0, 2.0])
    assert traces.n == 1


def test_an_array_in_a_structures_metadata_is_lifted(traces):
    if not hasattr(jax.tree_util.tree_structure(0), "from_node_data_and_children"):
        pytest.skip("rebuilding pytree metadata needs PyTreeDef.from_node_data_and_children")

    def apply(leaves, structure, x):
        traces()
        node = jax.tree_util.tree_unflatten(structure, leaves)
        return x * node.scale + node.offset

    Node = _node_class()
    ours = stable_jit(apply, static_argnums=1)
    for offset in (1.0, 2.0):
        leaves, structure = jax.tree_util.tree_flatten(Node(jnp.float32(3.0), jnp.full(2, offset)))
        np.testing.assert_array_equal(ours(leaves, structure, jnp.ones(2)), 3.0 + offset)
    assert traces.n == 1  # the metadata's array is an input, as the leaves are


class _Level:
    """Hashable, compared by its own equality."""

    def __init__(self, n):
        self.n = n

    def __eq__(self, other):
        return type(other) is _Level and other.n == self.n

    def __hash__(self):
        return hash(self.n)


class _Holder:
    def __init__(self, level):
        self.level = level


def test_a_static_function_over_an_object_holding_a_hashable_one_is_keyed_and_rechecked():
    # diffrax's tests pass such functions (terms over solvers) to eqx.filter_jit: the record
    # built for the function once raised TypeError on the hashable object's key.
    holder = _Holder(_Level(2))

    def scale(x):
        return x * holder.level.n

    f = stable_jit(lambda g, x: g(x), static_argnums=0)
    for _ in range(3):
        assert f(scale, jnp.float32(3.0)) == 6.0
    holder.level.n = 5  # its equality changes with it: a new key, not a stale program
    assert f(scale, jnp.float32(3.0)) == 15.0
    assert stablejit.num_traces(f) == 2
