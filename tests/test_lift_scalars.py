"""lift_scalars: closed-over Python numbers as inputs, with a static fallback."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import backend_rtol

from stablejit import stable_jit


def _scaled(lr, n=3, **options):
    def f(x):
        f.traces.append(1)
        return x * lr + n

    f.traces = _scaled.traces
    return stable_jit(f, **options)


@pytest.fixture
def count():
    _scaled.traces = []
    return _scaled.traces


def test_a_changing_float_is_lifted_and_does_not_retrace(count):
    for lr in (0.1, 0.2, 0.3, -0.0, float("nan")):
        out = _scaled(lr, lift_scalars=True)(jnp.ones(2))
        np.testing.assert_allclose(out, np.float32(lr) + 3, rtol=1e-6)
    assert len(count) == 1


def test_by_default_floats_are_static(count):
    for lr in (0.1, 0.2):
        _scaled(lr)(jnp.ones(2))
    assert len(count) == 2


def test_lifted_floats_stay_weakly_typed():
    out = _scaled(0.5, lift_scalars=True)(jnp.ones(2, jnp.bfloat16))
    assert out.dtype == jnp.bfloat16


def test_ints_are_lifted_only_when_named(count):
    for n in (1, 2, 3):
        np.testing.assert_allclose(_scaled(0.5, n, lift_scalars=True)(jnp.ones(1)), [0.5 + n])
    assert len(count) == 3
    count.clear()
    for n in (1, 2, 3):
        np.testing.assert_allclose(_scaled(0.5, n, lift_scalars=["n"])(jnp.ones(1)), [0.5 + n])
    assert len(count) == 1


def test_only_the_named_variables_are_lifted(count):
    for lr in (0.1, 0.2):
        _scaled(lr, lift_scalars=["n"])(jnp.ones(1))
    assert len(count) == 2


def test_a_lifted_number_used_as_a_shape_falls_back_to_static(traces):
    def make(n):
        def f(x):
            traces()
            return jnp.zeros(n) + x.sum()

        return stable_jit(f, lift_scalars=["n"])

    for n in (2, 3, 2, 3):
        np.testing.assert_array_equal(make(n)(jnp.ones(2)), np.full(n, 2.0))
    # One failed trace with n lifted, then one per distinct n.
    assert traces.n == 3


def test_a_lifted_number_in_a_python_if_falls_back_to_static_and_stays_correct(traces):
    def make(lr):
        def f(x):
            traces()
            return x * 2 if lr > 0.15 else x

        return stable_jit(f, lift_scalars=True)

    for lr in (0.1, 0.2, 0.1, 0.2):
        np.testing.assert_array_equal(make(lr)(jnp.ones(1)), [2.0 if lr > 0.15 else 1.0])
    assert traces.n == 3


def test_an_error_that_is_not_about_lifting_is_raised():
    lr = 0.1

    def f(x):
        raise ValueError("user bug")

    with pytest.raises(ValueError, match="user bug"):
        stable_jit(f, lift_scalars=True)(jnp.ones(1) * lr)


def test_lift_scalars_reaches_nested_closures_and_globals(traces):
    def make(scale, shift):
        def inner(x):
            return x * scale

        def f(x):
            traces()
            return inner(x) + shift

        return stable_jit(f, lift_scalars=["scale", "shift"])

    for scale in (1.0, 2.0):
        for shift in (0, 5):
            np.testing.assert_allclose(make(scale, shift)(jnp.ones(1)), [scale + shift])
    assert traces.n == 1


def test_lower_falls_back_too():
    def make(n):
        return stable_jit(lambda x: jnp.zeros(n) + x, lift_scalars=["n"])

    assert make(4).lower(jnp.ones(())).compile()(jnp.ones(())).shape == (4,)


@pytest.mark.parametrize("bad", [3, 1.5, [1], object()])
def test_bad_lift_scalars_is_a_type_error(bad):
    with pytest.raises(TypeError, match="lift_scalars"):
        stable_jit(lambda x: x, lift_scalars=bad)


def test_lifted_scalars_under_grad():
    def loss(w, lr):
        return stable_jit(lambda w: (w * lr) ** 2, lift_scalars=True)(w)

    np.testing.assert_allclose(jax.grad(loss)(3.0, 0.5), 2 * 3.0 * 0.25)


@pytest.mark.parametrize("make", ["sgd", "adam", "chain"])
def test_an_optax_learning_rate_changed_per_epoch_compiles_once(traces, make):
    optax = pytest.importorskip("optax")

    def build(lr):
        if make == "sgd":
            return optax.sgd(lr, momentum=0.9)
        if make == "adam":
            return optax.adam(lr)
        return optax.chain(optax.clip_by_global_norm(1.0), optax.adam(lr))

    def epoch(params, lr, lift):
        opt = build(lr)
        state = opt.init(params)

        def step(params, state, x):
            traces()
            grads = jax.grad(lambda p: ((x @ p) ** 2).mean())(params)
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        f = stable_jit(step, lift_scalars=True) if lift else step
        for _ in range(2):
            params, state = f(params, state, jnp.ones((2, 3)))
        return params

    p = q = jnp.arange(3.0)
    for lr in (0.1, 0.05, 0.025):
        p = epoch(p, lr, lift=True)
    n = traces.n
    with jax.disable_jit():
        for lr in (0.1, 0.05, 0.025):
            q = epoch(q, lr, lift=False)
    # (Compiled against eager: adam's update fused by XLA, on a TPU approximately.)
    np.testing.assert_allclose(p, q, rtol=backend_rtol(1e-5))
    assert n == 1


_TRACED: list = []


def test_named_int_beyond_int32_stays_static_when_redefined():
    # A named int is lifted only while it fits int32: a redefinition past
    # that is static, and back again is lifted.
    n0 = len(_TRACED)

    def make(n):
        def f(x):
            _TRACED.append(1)
            return x + n % 7

        return f

    x = jnp.ones(2)
    for n, traced in [(3, 1), (5, 1), (2**40, 2), (2**40 + 1, 3), (4, 3)]:
        np.testing.assert_allclose(stable_jit(make(n), lift_scalars=["n"])(x), x + n % 7)
        assert len(_TRACED) - n0 == traced
