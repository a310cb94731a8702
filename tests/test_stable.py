"""stable(fn): closures as pytrees, so JAX's own caches hit by structure."""

import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.extend.core import jaxpr_as_fun

from stablejit import StableFunction, stable, stable_jit


def _model(w, b, act="tanh"):
    def predict(x):
        h = x @ w + b
        return jnp.tanh(h) if act == "tanh" else jax.nn.relu(h)

    return predict


def _params(k):
    return jnp.full((3, 2), float(k)), jnp.arange(2.0) + k


def test_equal_structure_means_equal_treedef_and_leaves_are_the_arrays():
    w, b = _params(1)
    f, g = stable(_model(w, b)), stable(_model(*_params(2)))
    assert jax.tree_util.tree_structure(f) == jax.tree_util.tree_structure(g)
    leaves = jax.tree_util.tree_leaves(f)
    assert sorted(map(id, leaves)) == sorted([id(w), id(b)])
    assert jax.tree_util.tree_structure(f) != jax.tree_util.tree_structure(
        stable(_model(w, b, act="relu"))
    )


def test_passed_into_jax_jit_it_hits_across_redefinitions(traces):
    @jax.jit
    def apply(f, x):
        traces()
        return f(x)

    x = jnp.ones((4, 3))
    for k in range(4):
        fn = _model(*_params(k))
        np.testing.assert_allclose(apply(stable(fn), x), fn(x), rtol=1e-6)
    assert traces.n == 1
    apply(stable(_model(*_params(0), act="relu")), x)
    assert traces.n == 2


def test_tree_map_and_unflatten_round_trip():
    fn = _model(*_params(1))
    f = stable(fn)
    doubled = jax.tree_util.tree_map(lambda a: a * 2, f)
    assert isinstance(doubled, StableFunction)
    x = jnp.ones((1, 3))
    np.testing.assert_allclose(doubled(x), _model(*(p * 2 for p in _params(1)))(x), rtol=1e-6)
    leaves, treedef = jax.tree_util.tree_flatten(f)
    np.testing.assert_allclose(jax.tree_util.tree_unflatten(treedef, leaves)(x), fn(x))


def test_carried_through_lax_scan():
    f = stable(_model(*_params(1)))

    def body(g, _):
        g = jax.tree_util.tree_map(lambda a: a + 1, g)
        return g, g(jnp.ones((1, 3)))

    final, ys = lax.scan(body, f, None, length=3)
    assert isinstance(final, StableFunction)
    np.testing.assert_allclose(ys[-1], _model(*_params(4))(jnp.ones((1, 3))), rtol=1e-6)


def test_grad_flows_to_the_closed_over_arrays():
    w, b = _params(1)
    grads = jax.grad(lambda f: f(jnp.ones((1, 3))).sum())(stable(_model(w, b)))
    want = jax.grad(lambda w, b: _model(w, b)(jnp.ones((1, 3))).sum(), argnums=(0, 1))(w, b)
    got = sorted(jax.tree_util.tree_leaves(grads), key=jnp.ndim)  # b's, then w's
    for g, e in zip(got, want[::-1], strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6)


def test_stored_in_an_equinox_module():
    eqx = pytest.importorskip("equinox")

    class Head(eqx.Module):
        fn: StableFunction
        scale: jax.Array

        def __call__(self, x):
            return self.fn(x) * self.scale

    calls = []

    @eqx.filter_jit
    def run(m, x):
        calls.append(1)
        return m(x)

    x = jnp.ones((2, 3))
    for k in range(3):
        fn = _model(*_params(k))
        np.testing.assert_allclose(run(Head(stable(fn), jnp.float32(2)), x), fn(x) * 2, rtol=1e-6)
    assert len(calls) == 1


def test_a_stable_function_closed_over_by_stable_jit_lifts_its_leaves(traces):
    def make(k):
        f = stable(_model(*_params(k)))

        def g(x):
            traces()
            return f(x)

        return g

    x = jnp.ones((1, 3))
    for k in range(3):
        np.testing.assert_allclose(stable_jit(make(k))(x), _model(*_params(k))(x), rtol=1e-6)
    assert traces.n == 1


def test_lift_scalars_makes_numbers_leaves():
    def make(t):
        return stable(lambda x: x / t, lift_scalars=True)

    assert jax.tree_util.tree_structure(make(0.5)) == jax.tree_util.tree_structure(make(2.0))
    assert jax.tree_util.tree_leaves(make(0.5)) == [0.5]
    np.testing.assert_allclose(jax.jit(lambda f: f(1.0))(make(4.0)), 0.25)


def test_the_structure_keeps_no_array_alive():
    import gc
    import weakref

    w = jnp.ones((3, 2))
    ref = weakref.ref(w)
    static = jax.tree_util.tree_structure(stable(_model(w, jnp.zeros(2))))
    del w
    gc.collect()
    assert ref() is None
    assert static.num_leaves == 2


def test_not_callable_is_a_type_error():
    with pytest.raises(TypeError, match="stable expects a callable"):
        stable(3)


def test_a_closed_jaxpr_is_never_changed_by_a_trace(traces):
    # JAX caches what it derives from a ClosedJaxpr by identity: its lifted
    # constants reach the trace in a copy, so no tracer is ever left in it.
    seen = []
    offset = jnp.full(2, 3.0)
    closed = jax.make_jaxpr(lambda x: x * 2.0 + offset)(jnp.ones(2))
    consts = list(closed.consts)
    original = weakref.ref(closed)  # a way to the object itself, not its substitute

    def f(x):
        traces()
        seen.append(any(isinstance(c, jax.core.Tracer) for c in original().consts))
        return jaxpr_as_fun(closed)(x)[0]

    for _ in range(2):
        np.testing.assert_array_equal(stable_jit(f)(jnp.ones(2)), [5.0, 5.0])
        assert all(a is b for a, b in zip(closed.consts, consts, strict=True))
    assert consts and seen == [False] and traces.n == 1
