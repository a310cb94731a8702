"""Small NumPy arrays are constants, as under ``jax.jit``; larger ones are lifted.

``jax.jit`` embeds a closed-over NumPy array as a constant, so NumPy code on it runs on concrete
values inside the trace (numpyro validates a distribution's parameters that way). Up to
``config.numpy_constant_bytes`` stablejit keeps such an array concrete too, keyed by its
contents (never stale); a larger one is lifted like a ``jax.Array``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import count_trace as _traced

import stablejit
from stablejit import stable_jit


def _validated(params):
    # numpyro's pattern: validate where the parameters are concrete.
    def build():
        if not isinstance(params, jax.core.Tracer) and not np.all(params > 0):
            raise ValueError("params must be positive")
        return jnp.asarray(params) * 2

    return build


def test_a_small_numpy_array_is_concrete_inside_the_trace_as_under_jax_jit():
    bad = np.array([1.0, -1.0])
    with pytest.raises(ValueError, match="positive"):
        jax.jit(_validated(bad))()
    with pytest.raises(ValueError, match="positive"):
        stable_jit(_validated(bad))()
    good = np.array([1.0, 3.0])
    np.testing.assert_array_equal(stable_jit(_validated(good))(), [2.0, 6.0])


def _closure(w):
    def f(x):
        _traced()
        return x * w

    return f


def test_equal_contents_hit_and_new_contents_retrace(traced):
    x = jnp.arange(3.0)
    for _ in range(6):  # fresh arrays of equal contents: one trace
        np.testing.assert_array_equal(stable_jit(_closure(np.full(3, 2.0)))(x), x * 2)
    assert traced() == 1
    w = np.full(3, 2.0)
    f = stable_jit(_closure(w))
    w[1] = 5.0  # written in place: jax.jit would keep the baked 2.0
    np.testing.assert_array_equal(f(x), x * w)
    np.testing.assert_array_equal(stable_jit(_closure(w))(x), x * w)
    assert traced() == 2
    # dtype and shape are part of the contents' key.
    np.testing.assert_array_equal(stable_jit(_closure(np.full(3, 2, np.int32)))(x), x * 2)
    np.testing.assert_array_equal(stable_jit(_closure(np.full((1, 3), 2.0)))(x), x[None] * 2)
    assert traced() == 4


def test_the_threshold_is_inclusive_and_larger_arrays_are_lifted():
    seen = []

    def make(w):
        def f(x):
            seen.append(type(w))
            return x + w.sum()

        return f

    limit = stablejit.config.numpy_constant_bytes
    stable_jit(make(np.ones(limit // 4, np.float32)))(1.0)
    stable_jit(make(np.ones(limit // 4 + 1, np.float32)))(1.0)
    assert seen[0] is np.ndarray
    assert issubclass(seen[1], jax.core.Tracer)


def test_zero_bytes_lifts_every_numpy_array(traces):
    stablejit.config.numpy_constant_bytes = 0

    def make(w):
        def f(x):
            traces()
            assert isinstance(w, jax.core.Tracer)
            return x * w

        return f

    x = jnp.arange(2.0)
    for k in range(3):  # new contents, no retrace
        np.testing.assert_array_equal(stable_jit(make(np.full(2, float(k))))(x), x * k)
    assert traces.n == 1


def test_object_arrays_are_never_constants_by_their_pointers(traces):
    # An object array's bytes are pointers: keyed by them, a reused address
    # would equate two arrays. It is lifted, as before, and JAX refuses it.
    w = np.array([1.0, None], dtype=object)
    with pytest.raises(TypeError):
        stable_jit(lambda x: x * w)(1.0)


@pytest.mark.parametrize("value, error", [(-1, ValueError), (1.5, TypeError), (True, TypeError)])
def test_numpy_constant_bytes_rejects_bad_values(value, error):
    with pytest.raises(error, match="numpy_constant_bytes"):
        stablejit.config.numpy_constant_bytes = value
