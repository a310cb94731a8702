"""Inside jax.grad, jax.vmap and jax.jit, with closures holding tracers."""

import jax
import jax.numpy as jnp
import numpy as np

from stablejit import stable_jit


def loss_with_closure(w, x):
    def inner(x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    return stable_jit(inner)(x)


def eager_loss(w, x):
    return jnp.sum(jnp.tanh(x @ w) ** 2)


W = jnp.arange(6.0).reshape(3, 2) / 6
X = jnp.arange(6.0).reshape(2, 3) / 3


def test_grad_through_a_closed_over_tracer():
    np.testing.assert_allclose(
        jax.grad(loss_with_closure)(W, X), jax.grad(eager_loss)(W, X), rtol=1e-6
    )


def test_grad_wrt_the_argument():
    np.testing.assert_allclose(
        jax.grad(loss_with_closure, argnums=1)(W, X),
        jax.grad(eager_loss, argnums=1)(W, X),
        rtol=1e-6,
    )


def test_vmap_over_a_closed_over_tracer():
    ws = jnp.stack([W, W * 2, W * 3])
    np.testing.assert_allclose(
        jax.vmap(loss_with_closure, (0, None))(ws, X),
        jax.vmap(eager_loss, (0, None))(ws, X),
        rtol=1e-6,
    )


def test_inside_jax_jit_traces_once_per_outer_trace(traces):
    @jax.jit
    def outer(w, x):
        def inner(x):
            traces()
            return x @ w

        return stable_jit(inner)(x) + 1

    np.testing.assert_allclose(outer(W, X), X @ W + 1, rtol=1e-6)
    np.testing.assert_allclose(outer(W * 2, X), X @ W * 2 + 1, rtol=1e-6)
    assert traces.n == 1


def test_jit_of_grad_of_vmap():
    f = jax.jit(jax.grad(lambda w: jax.vmap(lambda x: loss_with_closure(w, x[None]))(X).sum()))
    g = jax.grad(lambda w: jax.vmap(lambda x: eager_loss(w, x[None]))(X).sum())
    np.testing.assert_allclose(f(W), g(W), rtol=1e-5)


def test_repeated_eager_grad_calls_reuse_the_trace(traces):
    def loss(w, x):
        def inner(x):
            traces()
            return jnp.sum(x @ w)

        return stable_jit(inner)(x)

    for i in range(3):
        np.testing.assert_allclose(jax.grad(loss)(W * i, X), jax.grad(lambda w: jnp.sum(X @ w))(W))
    assert traces.n == 1


def test_closure_over_concrete_and_traced_values_mixed():
    def f(w, scale):
        def inner(x):
            return x @ w * scale

        return stable_jit(inner)(X).sum()

    np.testing.assert_allclose(
        jax.grad(f)(W, 3.0), jax.grad(lambda w: (X @ w * 3.0).sum())(W), rtol=1e-6
    )


def test_custom_jvp_function_in_closure():
    @jax.custom_jvp
    def safe_log(x):
        return jnp.log(x)

    safe_log.defjvp(lambda p, t: (safe_log(p[0]), t[0] / p[0]))

    def f(x):
        return stable_jit(lambda y: safe_log(y).sum())(x)

    np.testing.assert_allclose(jax.grad(f)(jnp.full(2, 2.0)), [0.5, 0.5])
