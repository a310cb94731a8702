"""Closed-over arrays that code needs as concrete values are baked in, keyed by contents.

Under ``jax.jit`` a closed-over array is a constant, so library code may branch on it in
Python or read its value; stablejit lifts such arrays to inputs (``jax.Array``s, and NumPy
arrays above ``numpy_constant_bytes``), and falls back to baking the ones a trace needs
concretely, never going stale.
"""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablejit
from stablejit import stable_jit


def _masked(mask, w, traces):
    def f(x):
        traces()
        # A Python branch on a closed-over array, concrete under jax.jit (for
        # a jax.Array, only through NumPy: a jnp operation would be staged).
        if np.asarray(mask).any():
            return x * w
        return x - w

    return stable_jit(f)


def _eager(mask, w, x):
    return x * w if mask.any() else x - w


def test_an_array_used_in_a_python_branch_runs_as_under_jax_jit(traces, caplog):
    caplog.set_level(logging.INFO, logger="stablejit")
    mask, w, x = jnp.array([True, False]), jnp.ones(2), jnp.arange(2.0)
    np.testing.assert_array_equal(_masked(mask, w, traces)(x), _eager(mask, w, x))
    (notice,) = [r.getMessage() for r in caplog.records if r.name == "stablejit"]
    assert "closure variable 'mask' as a concrete value" in notice


def test_only_the_array_needed_concretely_is_baked(traces):
    mask, x = jnp.array([True, False]), jnp.arange(2.0)
    for k in range(4):  # new values of the other array: no retrace
        w = jnp.full(2, float(k))
        np.testing.assert_array_equal(_masked(mask, w, traces)(x), _eager(mask, w, x))
    assert traces.n == 2  # the failed trace with the mask lifted, then one


def test_a_baked_array_is_keyed_by_its_contents_never_stale(traces):
    # A NumPy array above numpy_constant_bytes: lifted, then baked by the fallback.
    w, x = jnp.ones(2), jnp.arange(2.0)
    mask = np.zeros(8192, bool)
    np.testing.assert_array_equal(_masked(mask, w, traces)(x), _eager(mask, w, x))
    mask[0] = True  # in place: jax.jit would keep the baked False
    np.testing.assert_array_equal(_masked(mask, w, traces)(x), _eager(mask, w, x))
    n = traces.n
    again = mask.copy()  # equal contents, another array: a hit
    np.testing.assert_array_equal(_masked(again, w, traces)(x), _eager(again, w, x))
    assert traces.n == n


def test_a_jax_array_read_as_a_python_int_sizes_the_output(traces):
    def make(n):
        def f(x):
            traces()
            return jnp.zeros(int(n)) + x  # int() of a closed-over array

        return stable_jit(f)

    for size in (3, 3, 5):
        np.testing.assert_array_equal(make(jnp.int32(size))(1.0), np.ones(size))
    assert traces.n == 3  # one failed trace, then one per distinct value


def test_a_tracer_of_an_enclosing_transformation_used_concretely_still_raises():
    def outer(mask):
        return stable_jit(lambda x: x * 2 if mask.any() else x)(1.0)

    with pytest.raises(jax.errors.TracerBoolConversionError):
        jax.jit(outer)(jnp.array([True]))


def test_an_array_needed_concretely_inside_a_nested_loop_is_baked_where_it_was_lifted(traces):
    # The loop body lifts the array again, as its third leaf (after two values of
    # the outer trace): the error names that leaf, which is not the outer
    # function's third. The outer function, which lifted the array, bakes it.
    def make(zc):
        def f(x):
            traces()
            a, b = x * 1.0, x * 2.0

            def body(i, y):
                return y + a + b + np.sum(np.diag(zc))  # NumPy: needs the array's value

            return stablejit.fori_loop(0, 2, body, x)

        return stable_jit(f)

    x = jnp.ones(2)
    for k in (2.0, 3.0):
        zc = jnp.eye(2) * k
        np.testing.assert_allclose(make(zc)(x), x + 2 * (3 * x + 2 * k))
