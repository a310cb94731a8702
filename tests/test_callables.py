"""Every kind of callable and closure content: keyed by structure, rebuilt right."""

import dataclasses
import enum
import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from stablejit import stable_jit
from stablejit._fingerprint import fingerprint


def _key(f):
    return fingerprint(f)[0]


def test_nested_closures_hit_and_lift_arrays_at_every_level(traces):
    def outer(w, b, depth):
        def level0(x):
            traces()
            return x @ w + b

        f = level0
        for _ in range(depth):
            f = (lambda g: lambda x: g(x) * 2)(f)
        return stable_jit(f)

    x = jnp.ones(2)
    for i in range(3):
        w, b = jnp.eye(2) * i, jnp.full(2, float(i))
        np.testing.assert_allclose(outer(w, b, 8)(x), (x @ w + b) * 2**8)
    assert traces.n == 1


def test_partial_is_keyed_by_function_and_arguments(traces):
    def f(x, k, w):
        traces()
        return x * k + w

    for w in (jnp.ones(2), jnp.zeros(2)):
        g = stable_jit(functools.partial(f, k=3, w=w))
        np.testing.assert_array_equal(g(jnp.ones(2)), 3 + w)
    assert traces.n == 1
    stable_jit(functools.partial(f, k=4, w=jnp.ones(2)))(jnp.ones(2))
    assert traces.n == 2


class Model:
    def __init__(self, scale, w):
        self.scale = scale
        self.w = w

    def apply(self, x):
        return x * self.scale + self.w


def test_methods_of_equal_objects_hit_though_they_compare_unequal(traces):
    a, b = Model(2.0, jnp.ones(2)), Model(2.0, jnp.zeros(2))
    assert a.apply != b.apply

    def run(m):
        def f(x):
            traces()
            return m.apply(x)

        return stable_jit(f)(jnp.ones(2))

    np.testing.assert_array_equal(run(a), [3.0, 3.0])
    np.testing.assert_array_equal(run(b), [2.0, 2.0])
    assert traces.n == 1
    np.testing.assert_array_equal(run(Model(3.0, jnp.zeros(2))), [3.0, 3.0])
    assert traces.n == 2


def test_bound_method_jitted_directly(traces):
    class M:
        def __init__(self, w):
            self.w = w

        def f(self, x):
            traces()
            return x + self.w

    for i in range(3):
        m = M(jnp.full(2, float(i)))
        np.testing.assert_array_equal(stable_jit(m.f)(jnp.zeros(2)), [i, i])
    assert traces.n == 1


def test_objects_whose_eq_and_hash_raise_are_walked_not_hashed(traces):
    class Bound:
        def __init__(self, w):
            self.w = w

        def __eq__(self, other):
            raise RuntimeError("no comparisons")

        __hash__ = __eq__

        def __call__(self, x):
            traces()
            return x * self.w

    for i in range(2):
        np.testing.assert_array_equal(stable_jit(Bound(jnp.full(1, i + 1.0)))(jnp.ones(1)), [i + 1])
    assert traces.n == 1


def test_decorated_method_binds_self_structurally(traces):
    class Layer:
        def __init__(self, w):
            self.w = w

        @stable_jit
        def __call__(self, x):
            traces()
            return x * self.w

    for i in range(3):
        np.testing.assert_array_equal(Layer(jnp.full(2, float(i)))(jnp.ones(2)), [i, i])
    assert traces.n == 1


def test_slots_objects_are_keyed_by_their_slots(traces):
    class P:
        __slots__ = ("k", "w")

        def __init__(self, k, w):
            self.k, self.w = k, w

    def run(p):
        def f(x):
            traces()
            return x * p.k + p.w

        return stable_jit(f)(jnp.ones(1))

    np.testing.assert_array_equal(run(P(2, jnp.zeros(1))), [2.0])
    np.testing.assert_array_equal(run(P(2, jnp.ones(1))), [3.0])
    assert traces.n == 1
    np.testing.assert_array_equal(run(P(5, jnp.ones(1))), [6.0])
    assert traces.n == 2


class Params(NamedTuple):
    w: jax.Array
    depth: int


@dataclasses.dataclass
class Frozen:
    w: jax.Array
    act: str


jax.tree_util.register_dataclass(Frozen, data_fields=["w"], meta_fields=["act"])


def test_pytrees_lift_their_leaves_and_key_their_structure(traces):
    def run(p, fz):
        def f(x):
            traces()
            y = x * p.w * fz.w
            return jnp.tanh(y) if fz.act == "tanh" else y

        return stable_jit(f)(jnp.ones(2))

    np.testing.assert_allclose(run(Params(jnp.ones(2), 1), Frozen(jnp.ones(2), "id")), [1, 1])
    np.testing.assert_allclose(run(Params(jnp.ones(2) * 2, 1), Frozen(jnp.ones(2), "id")), [2, 2])
    assert traces.n == 1
    np.testing.assert_allclose(
        run(Params(jnp.ones(2), 1), Frozen(jnp.ones(2), "tanh")), np.tanh([1, 1])
    )
    assert traces.n == 2


def test_equal_code_in_two_exec_namespaces_hits_and_sees_its_own_globals(traces):
    src = "def f(x):\n    T()\n    return x * K\n"
    outs = []
    for k in (2.0, 2.0, 3.0):
        ns = {"K": k, "T": traces}
        exec(src, ns)
        outs.append(float(stable_jit(ns["f"])(jnp.ones(()))))
    assert outs == [2.0, 2.0, 3.0]
    assert traces.n == 2


def test_globals_holding_arrays_are_lifted(traces):
    ns = {"W": jnp.ones(2), "T": traces}
    exec("def f(x):\n    T()\n    return x + W\n", ns)
    f = stable_jit(ns["f"])
    np.testing.assert_array_equal(f(jnp.zeros(2)), [1.0, 1.0])
    ns["W"] = jnp.ones(2) * 4
    np.testing.assert_array_equal(f(jnp.zeros(2)), [4.0, 4.0])
    assert traces.n == 1


def test_arrays_in_defaults_are_lifted(traces):
    def make(w):
        def f(x, w=w):
            traces()
            return x + w

        return stable_jit(f)

    np.testing.assert_array_equal(make(jnp.ones(1))(jnp.zeros(1)), [1.0])
    np.testing.assert_array_equal(make(jnp.zeros(1))(jnp.zeros(1)), [0.0])
    assert traces.n == 1
    np.testing.assert_array_equal(make(jnp.zeros(1))(jnp.zeros(1), jnp.ones(1) * 3), [3.0])


def test_jax_jit_wrapped_function_in_a_closure_keeps_its_options(traces):
    def outer(w, n):
        @functools.partial(jax.jit, static_argnums=1)
        def step(x, n):
            return x * w * n

        def f(x):
            traces()
            return step(x, n)

        return stable_jit(f)

    np.testing.assert_array_equal(outer(jnp.ones(1), 2)(jnp.ones(1)), [2.0])
    np.testing.assert_array_equal(outer(jnp.ones(1) * 3, 2)(jnp.ones(1)), [6.0])
    assert traces.n == 1
    assert _key(jax.jit(lambda x: x, static_argnums=0)) != _key(jax.jit(lambda x: x))


def test_stable_jit_inside_stable_jit(traces):
    def outer(w):
        inner = stable_jit(lambda x: x + w)

        def f(x):
            traces()
            return inner(x) * 2

        return stable_jit(f)

    np.testing.assert_array_equal(outer(jnp.ones(1))(jnp.ones(1)), [4.0])
    np.testing.assert_array_equal(outer(jnp.zeros(1))(jnp.ones(1)), [2.0])
    assert traces.n == 1


def test_cycle_through_an_instance_attribute(traces):
    class Trainer:
        def __init__(self, lr, w):
            self.lr, self.w = lr, w
            self.update = jax.jit(self.update)  # instance -> jit -> method -> instance

        def update(self, x):
            traces()
            return x - self.lr * self.w

    for w in (jnp.ones(2), jnp.zeros(2)):
        t = Trainer(0.5, w)
        np.testing.assert_array_equal(stable_jit(t.update)(jnp.ones(2)), 1 - 0.5 * w)
    assert traces.n == 1


def test_recursive_closure(traces):
    def make(w):
        def f(x, n):
            if n == 0:
                traces()
                return x + w
            return f(x * 2, n - 1)

        return stable_jit(f, static_argnums=1)

    np.testing.assert_array_equal(make(jnp.ones(1))(jnp.ones(1), 3), [9.0])
    np.testing.assert_array_equal(make(jnp.zeros(1))(jnp.ones(1), 3), [8.0])
    assert traces.n == 1


def test_self_referencing_list_and_dict():
    a = [1]
    a.append(a)
    d = {"w": jnp.ones(1)}
    d["self"] = d
    f = lambda x: x * a[0] + d["self"]["w"]  # noqa: E731
    np.testing.assert_array_equal(stable_jit(f)(jnp.ones(1)), [2.0])
    assert _key(f) == _key(f)


class Color(enum.Enum):
    RED = 1
    BLUE = 2


def test_enums_dtypes_and_library_functions_are_static(traces):
    def run(c, dt, act):
        def f(x):
            traces()
            return act(x.astype(dt)) * (1 if c is Color.RED else -1)

        return stable_jit(f)(jnp.ones(2))

    run(Color.RED, jnp.float32, jnp.tanh)
    run(Color.RED, jnp.float32, jnp.tanh)
    assert traces.n == 1
    np.testing.assert_allclose(run(Color.BLUE, jnp.float32, jnp.tanh), -np.tanh([1, 1]), rtol=1e-6)
    assert run(Color.RED, jnp.int32, jnp.abs).dtype == jnp.int32
    run(Color.RED, jnp.float32, jax.nn.relu)
    assert traces.n == 4


def test_closure_over_the_same_code_with_different_captured_functions():
    def make(g):
        return lambda x: g(x)

    assert _key(make(jnp.sin)) != _key(make(jnp.cos))
    assert _key(make(jnp.sin)) == _key(make(jnp.sin))
    assert _key(make(lambda x: x + 1)) != _key(make(lambda x: x + 2))


def test_unpicklable_opaque_object_is_logged_once_and_keyed_by_identity(caplog):
    class Handle:
        __slots__ = ()

        def __reduce__(self):
            raise TypeError("no pickling")

    h = Handle()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        k1 = _key(lambda: h)
        assert _key(lambda: h) == k1
        assert _key(lambda: Handle()) != k1
    notices = [r.getMessage() for r in caplog.records if r.name == "stablejit"]
    assert len(notices) == 1 and "Handle objects" in notices[0]


def test_picklable_opaque_object_is_keyed_by_value():
    class Spec:
        __slots__ = ()

        def __reduce__(self):
            return (Spec, ())

    assert _key(lambda: Spec()) == _key(lambda: Spec())


@pytest.mark.parametrize("kind", ["list", "tuple", "dict"])
def test_container_structure_is_keyed(kind):
    wrap = {"list": list, "tuple": tuple, "dict": lambda xs: dict(enumerate(xs))}[kind]
    f1 = (lambda c: lambda: c)(wrap([1, 2]))
    f2 = (lambda c: lambda: c)(wrap([1, 2]))
    f3 = (lambda c: lambda: c)(wrap([1, 2, 3]))
    assert _key(f1) == _key(f2) != _key(f3)


def test_back_references_count_the_same_with_and_without_the_fast_path(traces):
    # A library function reached by a full walk must not take a number that a
    # fast-path match of the same function does not: the back reference ("b
    # is a") after it would differ, and a trace counter (which invalidates
    # fast paths) would then cost a retrace per call.
    from os.path import join  # a library function, keyed by identity

    def helper(x):
        return x if join else None

    def run(w):
        a = b = [2.0]

        def f(x):
            traces()
            return helper(x) * a[0] * b[0] * w

        return stable_jit(f)(jnp.ones(2))

    for i in range(4):
        np.testing.assert_array_equal(run(jnp.full(2, float(i))), [4.0 * i] * 2)
    assert traces.n == 1


# ------------------------------------------- the fast path over nested closures
# A redefined closure whose children are numbers, arrays, modules and other
# such closures (an optax optimiser) is re-checked by identity instead of
# walked. These tests check that the re-check sees every change a walk sees.


def _record(f):
    from stablejit._code import code_info

    return code_info(f.__code__).fast[0]


_TRACED: list = []


def _traced() -> None:
    """Counts traces as a global list does (a side channel the fast path
    allows, where a closed-over counter object would take the full walk)."""
    _TRACED.append(None)


@pytest.fixture
def traced():
    n = len(_TRACED)
    return lambda: len(_TRACED) - n


def _optimiser(lr, w):
    def scale(g):
        return g * lr

    def shift(g):
        return g + w

    def update(g):
        return shift(scale(g))

    return update


def test_redefined_closure_of_closures_hits_by_the_fast_path_and_lifts_arrays(traced):
    def step(lr, w, x):
        update = _optimiser(lr, w)

        def f(x):
            _traced()
            return update(x)

        return stable_jit(f)(x)

    x = jnp.arange(3.0)
    for i in range(4):
        w = jnp.full(3, float(i))
        np.testing.assert_allclose(step(0.5, w, x), x * 0.5 + i)
    assert traced() == 1
    assert _record(_optimiser(0.5, w)).nested


def test_fast_path_sees_a_changed_number_in_a_nested_closure(traces):
    def run(lr):
        update = _optimiser(lr, jnp.ones(2))

        def f(x):
            traces()
            return update(x)

        return stable_jit(f)(jnp.ones(2))

    for lr, n in [(0.5, 1), (0.5, 1), (2.0, 2), (float("0.5"), 2), (2, 3), (-0.0, 4), (0.0, 5)]:
        np.testing.assert_allclose(run(lr), jnp.ones(2) * lr + 1)
        assert traces.n == n


def test_fast_path_sees_a_rebound_cell_and_global_of_a_nested_closure(traces):
    ns = {"jnp": jnp, "K": 2.0}
    exec("def make(c):\n    def inner(y):\n        return y * c + K\n    return inner", ns)
    inner = ns["make"](3.0)

    def f(x):
        traces()
        return inner(x)

    g = stable_jit(f)
    x = jnp.ones(2)
    np.testing.assert_allclose(g(x), x * 3 + 2)
    np.testing.assert_allclose(g(x), x * 3 + 2)
    inner.__closure__[0].cell_contents = 5.0  # jax.jit would return x * 3 + 2
    np.testing.assert_allclose(g(x), x * 5 + 2)
    ns["K"] = 7.0
    np.testing.assert_allclose(g(x), x * 5 + 7)
    assert traces.n == 3


def test_nested_closures_of_one_code_over_different_functions_are_told_apart():
    def wrap(act):
        return lambda y: act(y) + 1

    inner_fns = [lambda y: y * 2, lambda y: y * 3, jnp.tanh, lambda y: y * 2]
    x = jnp.arange(3.0)
    for _ in range(2):
        for act in inner_fns:
            outer = wrap(wrap(act))
            f = stable_jit(lambda x, outer=outer: outer(x))
            np.testing.assert_allclose(f(x), act(x) + 2, rtol=1e-6)


def test_a_function_held_twice_keys_as_a_back_reference_on_the_fast_path(traced):
    class Transform(NamedTuple):
        init: object
        update: object

    def make(lr, w):
        def init(p):
            return p * 0

        def update(g):
            return g * lr + w

        chain = (Transform(init, update), (update, init))

        def f(x):
            _traced()
            t, (u, i) = chain
            return t.update(x) + u(x) + i(x) + t.init(x)

        return f

    x = jnp.arange(3.0)
    for i in range(4):
        np.testing.assert_allclose(stable_jit(make(0.5, float(i) * jnp.ones(3)))(x), x + 2 * i)
    assert traced() == 1
    assert _record(make(0.5, x)).nested

    def make_distinct(lr, w):  # two updates of one code where `chain` held one twice
        f = make(lr, w)
        _, (u, i) = f.__closure__[0].cell_contents
        other = make(lr, w).__closure__[0].cell_contents[0]
        f.__closure__[0].cell_contents = (other, (u, i))
        return f

    np.testing.assert_allclose(stable_jit(make_distinct(0.5, x))(x), 2 * (x * 0.5 + x))
    assert traced() == 2
    # Keys equal a full walk's whichever structure the record was built from.
    shared, distinct = _key(make(0.5, x)), _key(make_distinct(0.5, x))
    assert shared != distinct == _key(make_distinct(0.5, x))
    assert _key(make(0.5, x)) == shared


def test_self_recursive_closure_takes_the_fast_path(traced):
    def make(w):
        def f(x, n=2):
            if n == 2:
                _traced()
            return x if n == 0 else f(x * w, n - 1)

        return f

    x = jnp.ones(2)
    for i in range(1, 4):
        np.testing.assert_allclose(stable_jit(make(jnp.full(2, float(i))))(x), x * i**2)
    assert traced() == 1
    assert _record(make(x)) is not None


def test_closure_over_none_takes_the_fast_path(traced):
    def make(w, mask=None):
        def f(x):
            _traced()
            return x * w if mask is None else x * w * mask

        return f

    x = jnp.ones(2)
    for i in range(3):
        np.testing.assert_allclose(stable_jit(make(float(i) * x))(x), x * i)
    assert _record(make(x)) is not None
    np.testing.assert_allclose(stable_jit(make(x, mask=x * 3))(x), x * 3)
    assert traced() == 2


def test_one_code_at_two_places_of_different_shape_keeps_a_record_for_each():
    # optax wraps every transform of a chain in a closure of one code; each
    # place must keep its record rather than rebuild one per walk.
    def wrap(tx):
        def update(g):
            return tx[1](g)

        return update

    def make(lr, w):
        a = wrap((None, lambda g: g * lr))
        b = wrap((jnp.tanh, lambda g: g + w))
        return {"chain": (a, b)}  # a dict: the outer function always takes the walk

    def run(lr, w):
        opt = make(lr, w)

        def f(x):
            a, b = opt["chain"]
            return b(a(x))

        return stable_jit(f)(jnp.ones(2))

    from stablejit._code import code_info

    np.testing.assert_allclose(run(0.5, jnp.ones(2)), [1.5, 1.5])
    info = code_info(wrap(None).__code__)
    kept = [info.fast[0], *info.fast[2]]  # held, so that no new record can reuse an address
    for i in range(3):
        np.testing.assert_allclose(run(0.5, jnp.full(2, float(i))), [0.5 + i] * 2)
    now = [info.fast[0], *info.fast[2]]
    assert len(now) == len(kept) == 2 and all(any(r is k for k in kept) for r in now)


def test_two_functions_of_one_module_reading_one_global_function_trace_once(traces):
    # Tracing puts a new function object in the module's namespace for the
    # global 'helper' (it reaches an array): the second reader must find it.
    ns = {"jnp": jnp, "W": jnp.ones(2), "traces": traces}
    exec(
        "def helper(x):\n    return x * W\n"
        "def first(x):\n    return helper(x) + 1\n"
        "def second(x):\n    return helper(x) - 1\n"
        "def both(x):\n    traces()\n    return first(x) + second(x)\n",
        ns,
    )
    f = stable_jit(ns["both"])
    np.testing.assert_array_equal(f(jnp.full(2, 3.0)), [6.0, 6.0])
    assert ns["helper"].__name__ == "helper" and ns["W"] is not None
    ns["W"] = jnp.ones(2) * 2.0  # lifted: no retrace
    np.testing.assert_array_equal(f(jnp.full(2, 3.0)), [12.0, 12.0])
    assert traces.n == 1
