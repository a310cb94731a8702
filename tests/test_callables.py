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
from _helpers import key as _key

from stablejit import stable_jit


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


def test_explaining_the_retrace_of_an_object_whose_eq_raises_does_not_raise(explained):
    class Bound:
        def __init__(self, w):
            self.w = w

        def __eq__(self, other):  # (inspect.signature compares callables with it)
            raise RuntimeError("no comparisons")

        __hash__ = object.__hash__

        def __call__(self, x):
            return x * self.w

    f = stable_jit(Bound(jnp.full(1, 2.0)))
    for n in (1, 2):  # a new shape: a retrace of the entry, explained
        np.testing.assert_array_equal(f(jnp.ones(n)), [2.0] * n)
    assert any("retraced" in m for m in explained())


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
        run(Params(jnp.ones(2), 1), Frozen(jnp.ones(2), "tanh")),
        np.tanh([1, 1]),
        rtol=1e-5,  # float32 tanh (a TPU's is ~3e-6 off float64)
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
    # float32 tanh against float64 (a TPU's is ~3e-6 off)
    np.testing.assert_allclose(run(Color.BLUE, jnp.float32, jnp.tanh), -np.tanh([1, 1]), rtol=1e-5)
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
