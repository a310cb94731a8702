"""Static arguments are keyed by structure, like what a function closes over."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

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


def test_lower_and_compile_take_the_dynamic_arguments():
    g = stable_jit(lambda x, fn: fn(x), static_argnums=1)
    compiled = g.lower(jnp.ones(2), _scaler(jnp.full(2, 4.0))).compile()
    np.testing.assert_array_equal(compiled(jnp.ones(2)), [4.0, 4.0])
