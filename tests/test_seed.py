"""The seed case: a nested function jitted on every call of its enclosing function."""

import jax
import jax.numpy as jnp
import numpy as np

from stablejit import stable_jit


def test_nested_function_compiles_once_over_many_calls(capsys):
    def outer(a):
        def inner(x):
            print("compiling")
            return x * 2

        return stable_jit(inner)(a)

    for i in range(20):
        a = jnp.arange(4.0) + i
        np.testing.assert_array_equal(outer(a), a * 2)
    assert capsys.readouterr().out.count("compiling") == 1


def test_new_closed_over_array_values_reuse_the_trace_and_give_new_results(traces):
    def outer(w, x):
        def inner(x):
            traces()
            return x @ w

        return stable_jit(inner)(x)

    x = jnp.ones(3)
    for i in range(5):
        w = jnp.full((3, 2), float(i))
        np.testing.assert_allclose(outer(w, x), x @ w)
    assert traces.n == 1


def test_closed_over_large_numpy_array_is_lifted_not_baked_in(traces):
    def outer(w):
        def inner(x):
            traces()
            assert isinstance(w, jax.core.Tracer)
            return x + w

        return stable_jit(inner)(jnp.zeros(2048))

    for i in range(3):
        w = np.full(2048, i, np.float32)  # 8 KiB, above numpy_constant_bytes
        np.testing.assert_array_equal(outer(w), w)
    assert traces.n == 1


def test_closed_over_scalar_change_retraces_and_old_value_hits_again(traces):
    def outer(k):
        def inner(x):
            traces()
            return x * k

        return stable_jit(inner)(jnp.ones(2))

    for k, expected in [(2, 1), (2, 1), (3, 2), (2, 2), (3, 2), (2.0, 3)]:
        np.testing.assert_array_equal(outer(k), np.ones(2) * k)
        assert traces.n == expected


def test_new_array_shape_retraces_like_jax_jit(traces):
    def outer(w):
        def inner(x):
            traces()
            return x + w.sum()

        return stable_jit(inner)(jnp.ones(2))

    outer(jnp.ones(3))
    outer(jnp.ones(3))
    outer(jnp.ones(4))
    outer(jnp.ones(4, jnp.int32))
    assert traces.n == 3


def test_lambda_redefined_per_call_hits(traces):
    def outer(x, c):
        return stable_jit(lambda y: (traces(), y + c)[1])(x)

    for _ in range(3):
        np.testing.assert_array_equal(outer(jnp.ones(2), 1.5), np.full(2, 2.5))
    assert traces.n == 1


def test_same_source_with_different_code_does_not_hit(traces):
    def f1(x):
        traces()
        return x + 1

    def f2(x):
        traces()
        return x - 1

    np.testing.assert_array_equal(stable_jit(f1)(jnp.zeros(1)), [1.0])
    np.testing.assert_array_equal(stable_jit(f2)(jnp.zeros(1)), [-1.0])
    assert traces.n == 2


def test_equal_scalars_computed_anew_each_call_hit(traces):
    def outer(x, lr):
        def inner(x):
            traces()
            return x * lr

        return stable_jit(inner)(x)

    for i in range(4):
        lr = float(f"0.{1 + i % 2}")  # a new float object each call
        np.testing.assert_allclose(outer(jnp.ones(1), lr), [lr])
    assert traces.n == 2
    np.testing.assert_array_equal(1 / outer(jnp.ones(1), float("-0.0")), [-np.inf])
    np.testing.assert_array_equal(1 / outer(jnp.ones(1), abs(float("-0.0"))), [np.inf])
