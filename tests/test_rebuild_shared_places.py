"""A place two functions read (a module global) is substituted once per trace.

At trace time the rebuild puts each substitute into the program's own place
(a global, a cell, a list item); a function read later that reads the same
place finds the substitute there, not the value the key walk saw. JAX's own
modules do this all the time (``threefry_2x32``, a ``jax.jit`` read by
several functions of ``jax._src.prng``), which stablejit walks when JAX is not
recognised as a library.
"""

import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np

from stablejit import stable_jit
from stablejit._fingerprint import rebuild


def _module(source: str, **names) -> dict:
    ns = {"jax": jax, "functools": functools, **names}
    exec(source, ns)
    return ns


_SHARED_JIT = """
def scale(x):
    return x * W

SCALE = jax.jit(scale)

def first(x):
    return SCALE(x)

def second(x):
    return SCALE(x) + 1

def both(x):
    TRACES()
    return first(x) + second(x)
"""


def test_a_jitted_global_read_by_two_functions_traces(traces):
    ns = _module(_SHARED_JIT, W=jnp.arange(3.0), TRACES=traces)
    f = stable_jit(ns["both"])
    x = jnp.ones(3)
    np.testing.assert_array_equal(f(x), 2 * x * ns["W"] + 1)
    ns["W"] = jnp.arange(3.0) * 2  # a new array of the same type: no retrace, new value
    np.testing.assert_array_equal(f(x), 2 * x * ns["W"] + 1)
    assert traces.n == 1
    assert ns["SCALE"]._fun is ns["scale"]  # the program's objects are put back


def test_a_wrapper_global_read_by_two_functions_traces(traces):
    # The same with wrappers of every non-cyclic kind around the shared function.
    for wrap in ("functools.partial(scale)", "(scale,)[0:1]", "[scale][0:1]"):
        src = _SHARED_JIT.replace("jax.jit(scale)", wrap)
        if "[0:1]" in wrap:
            src = src.replace("SCALE(x)", "SCALE[0](x)")
        ns = _module(src, W=jnp.arange(3.0), TRACES=traces)
        x = jnp.ones(3)
        np.testing.assert_array_equal(stable_jit(ns["both"])(x), 2 * x * ns["W"] + 1)


def _disagreeing(monkeypatch):
    """Makes every rebuild disagree with its key walk, as no kind should."""
    real = rebuild.Rebuilder.walk

    def disagreeing(self, v):
        if isinstance(v, jax.Array):
            raise rebuild.RebuildMismatch("made up for the test")
        return real(self, v)

    monkeypatch.setattr(rebuild.Rebuilder, "walk", disagreeing)


def test_a_rebuild_that_disagrees_with_the_key_walk_runs_as_jax_jit(monkeypatch, caplog):
    """Whatever makes the two walks disagree, the call runs as ``jax.jit``
    would, with a warning, instead of failing."""
    w = jnp.arange(3.0)

    def f(x):
        return x * w

    _disagreeing(monkeypatch)
    g = stable_jit(f)
    with caplog.at_level(logging.WARNING, logger="stablejit"):
        for _ in range(2):
            np.testing.assert_array_equal(g(jnp.ones(3)), w)
        np.testing.assert_array_equal(g.lower(jnp.ones(3)).compile()(jnp.ones(3)), w)
    assert caplog.text.count("plain jax.jit") == 1


def test_a_retrace_for_new_shapes_that_disagrees_runs_as_jax_jit(monkeypatch, traces):
    w = jnp.arange(3.0)

    def f(x):
        traces()
        return x.sum() * w

    g = stable_jit(f)
    np.testing.assert_array_equal(g(jnp.ones(2)), 2 * w)
    _disagreeing(monkeypatch)
    np.testing.assert_array_equal(g(jnp.ones(4)), 4 * w)  # JAX retraces the entry
    np.testing.assert_array_equal(g(jnp.ones(2)), 2 * w)
    assert g.cache_info().entries == 0  # the variant is no longer cached
