"""Patch mode: stablejit.patch() routes jax.jit and lax's loops to stablejit, and restores them."""

import functools

import jax
import jax.numpy as jnp
import pytest
from _helpers import params as _params
from jax import lax

import stablejit


def _reference_loop(while_loop, step, s):
    return while_loop(lambda s: s < 10.0, lambda s: s + step, s)


def test_patch_routes_jit_and_lax_loops_and_restores(traces):
    real_jit, real_while = jax.jit, lax.while_loop

    def generate(p):  # library-style code that looks jax.jit / lax.while_loop up at call time
        def body(s):
            traces()
            return s + p["b"][0]

        return jax.jit(lambda s: lax.while_loop(lambda s: s < 10.0, body, s))(0.0)

    with stablejit.patch():
        assert jax.jit is stablejit.stable_jit and lax.while_loop is stablejit.while_loop
        for seed in range(3):
            p = {"b": jnp.abs(_params(seed)["b"]) + 1.0}
            want = real_jit(functools.partial(_reference_loop, real_while, p["b"][0]))(0.0)
            assert float(generate(p)) == float(want)
    assert jax.jit is real_jit and lax.while_loop is real_while
    assert traces.n == 1


def test_patch_restores_on_exceptions_and_nests():
    real_jit = jax.jit
    with pytest.raises(KeyError):
        with stablejit.patch():
            raise KeyError("boom")
    assert jax.jit is real_jit
    stablejit.patch()
    with stablejit.patch():
        pass
    assert jax.jit is stablejit.stable_jit  # the outer patch() still holds
    stablejit.unpatch()
    assert jax.jit is real_jit
    with pytest.raises(RuntimeError, match="without a matching patch"):
        stablejit.unpatch()
