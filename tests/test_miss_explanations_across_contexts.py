"""JAX's cache-miss explanations (``jax_explain_cache_misses``) of a stable_jit
function compare its miss with keys of the config values it runs under, as
under jax.jit, though its canonical function is shared with every function of
the same code, some of which ran under other values; and with keys of
functions still alive, as jax.jit's keys die with their function."""

import gc

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import COMPILED, count_trace

from stablejit import stable_jit
from stablejit._runtime import jaxcaches

# Explanations compared with jax.jit's need JAX's trace cache (JAX 0.7 on), which
# stablejit makes forget a canonical function's keys of another context.
explained = pytest.mark.skipif(
    jaxcaches.FORGETS_TRACES is None, reason=f"JAX {jax.__version__} has no trace cache to forget"
)


def _sine_plus():
    """A new function object of one code on each call (a test's, a loop's)."""

    def f(x, y):
        count_trace()
        return jnp.sin(x) + y

    return f


def _identity():
    def f(x):
        return x

    return f


def _sweep() -> None:
    """Makes a new entry (where stablejit forgets the keys of dead functions)."""
    stable_jit(lambda a, b, c: a)(0, 1, 2)


def _explanation(caplog, call) -> str:
    caplog.clear()
    with jax.explain_cache_misses(True), caplog.at_level("WARNING"):
        call()
    (message,) = [r.getMessage() for r in caplog.records if "CACHE MISS" in r.getMessage()]
    return message


@explained
@pytest.mark.parametrize("jit", [jax.jit, stable_jit])
def test_a_weak_type_miss_is_explained_as_such_after_a_twin_ran_under_other_config(jit, caplog):
    twin = jit(_sine_plus())
    twin(0.0, 1.0)
    with jax.numpy_rank_promotion("warn"), jax.default_matmul_precision("high"):
        twin(0.0, 1.0)

    f = jit(_sine_plus())
    y = jnp.arange(4, dtype=jnp.float32)
    f(jnp.float32(0.0), y)
    message = _explanation(caplog, lambda: f(0.0, y))

    assert "different input types" in message
    assert "at x, now f32[]{weak_type=True} and before f32[]{weak_type=False}" in message
    assert "Tracing context" not in message


@explained
def test_a_miss_under_new_config_is_explained_by_the_config_as_under_jax_jit(caplog):
    f = stable_jit(_sine_plus())
    f(0.0, 1.0)
    with jax.numpy_rank_promotion("warn"):
        message = _explanation(caplog, lambda: f(0.0, 1.0))
    assert "Tracing context doesn't match" in message


def test_calls_in_each_config_after_switching_trace_and_compile_nothing_again(traced):
    # JAX forgets the canonical function's trace keys when its config
    # changes; what it traced and compiled must still serve every call.
    f = stable_jit(_sine_plus())
    x, y = np.float32(0.5), np.arange(3, dtype=np.float32)
    expected = np.sin(x) + y
    np.testing.assert_allclose(f(x, y), expected, rtol=1e-6)
    with jax.numpy_rank_promotion("warn"):
        np.testing.assert_allclose(f(x, y), expected, rtol=1e-6)
    np.testing.assert_allclose(f(x, y[:2]), expected[:2], rtol=1e-6)
    traces, compiles = traced(), len(COMPILED)
    assert traces == 3

    for _ in range(2):
        np.testing.assert_allclose(f(x, y), expected, rtol=1e-6)
        np.testing.assert_allclose(stable_jit(_sine_plus())(x, y[:2]), expected[:2], rtol=1e-6)
        with jax.numpy_rank_promotion("warn"):
            np.testing.assert_allclose(f(x, y), expected, rtol=1e-6)
    assert (traced(), len(COMPILED)) == (traces, compiles)
    with jax.numpy_rank_promotion("warn"):
        f.lower(x, y)
    f.lower(x, y[:2])
    assert traced() == traces


@explained
@pytest.mark.parametrize("jit", [jax.jit, stable_jit])
def test_a_new_functions_first_miss_is_never_seen_once_its_dead_twin_traced_other_types(
    jit, caplog
):
    twin = jit(_identity())
    twin(1)
    del twin
    gc.collect()
    _sweep()

    f = jit(_identity())
    message = _explanation(caplog, lambda: f(jnp.float32(1.0)))
    assert "never seen function" in message
    assert "different input types" not in message


@explained
@pytest.mark.parametrize("jit", [jax.jit, stable_jit])
def test_a_live_functions_miss_is_explained_by_its_own_keys_after_a_twin_died(jit, caplog):
    f = jit(_identity())
    f(1)
    twin = jit(_identity())
    twin(1.0)
    del twin
    gc.collect()
    _sweep()

    message = _explanation(caplog, lambda: f(jnp.ones(3)))
    assert "different input types" in message
    assert "never seen function" not in message


def test_a_dead_twins_keys_forgotten_trace_and_compile_nothing_again(traced):
    # Only JAX's trace cache forgets: what the twin traced and compiled
    # serves a new function of the same code at once.
    x = np.arange(3, dtype=np.float32)
    twin = stable_jit(_sine_plus())
    np.testing.assert_allclose(twin(x, 1.0), np.sin(x) + 1.0, rtol=1e-6)
    del twin
    gc.collect()
    _sweep()
    traces, compiles = traced(), len(COMPILED)

    f = stable_jit(_sine_plus())
    np.testing.assert_allclose(f(x, 1.0), np.sin(x) + 1.0, rtol=1e-6)
    assert (traced(), len(COMPILED)) == (traces, compiles)
