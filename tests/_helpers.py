"""Plain helper functions shared by several test modules (fixtures live in conftest.py)."""

import functools
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from stablejit import stable_jit
from stablejit._diagnostics import events
from stablejit._fingerprint.walk import fingerprint


def key(f):
    """The key stablejit's fingerprint gives ``f``."""
    return fingerprint(f)[0]


def wraps_through(f):
    """A ``functools.wraps`` wrapper of ``f``: every one shares one code
    object, with ``f``'s signature read through ``__wrapped__``, as
    ``jax.named_call``'s do."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        return f(*args, **kwargs)

    return wrapper


TRACED: list = []
"""Traces counted by :func:`count_trace` (see the ``traced`` fixture)."""


def count_trace() -> None:
    """Counts a trace in a global list: a side channel the fast path allows,
    where a closed-over counter object would take the full walk."""
    TRACED.append(None)


COMPILED: list = []
"""XLA compilations in this process (from JAX's monitoring events)."""


def _on_event(event: str, seconds: float, **_) -> None:
    if event == events.COMPILE:
        COMPILED.append(seconds)


jax.monitoring.register_event_duration_secs_listener(_on_event)


def backend_rtol(cpu: float) -> float:
    """``cpu`` as the relative tolerance of a compiled result against eager JAX on
    the CPU; on an accelerator, where XLA fuses and approximates some operations
    (a TPU's division and reciprocal square root), at least 1e-3."""
    return cpu if jax.default_backend() == "cpu" else max(cpu, 1e-3)


def params(seed):
    """Random parameters of an 8-token greedy-decoding loop."""
    k1, k2 = jax.random.split(jax.random.key(seed))
    return {"w": jax.random.normal(k1, (8, 8)), "b": jax.random.normal(k2, (8,))}


def child_env(**extra: str) -> dict:
    """The environment of a child Python that imports this checkout's stablejit: the
    checkout first on ``PYTHONPATH``, ahead of what the parent's ``PYTHONPATH`` names
    (where a machine keeps its JAX outside site-packages, as a TPU host does), and JAX
    on the CPU (an accelerator such as a TPU opens to one process at a time, and the
    parent, the test run, holds it)."""
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu", **extra}


# ---------------------------------------------------------------- models in closures


def call_in_closure(model, x, vmap=False):
    """``model`` (vmapped over ``x``'s first axis if ``vmap``) called through stable_jit
    of a closure defined anew, as a user's code defines one per call; a trace counted."""

    def f(x):
        count_trace()
        return jax.vmap(model)(x) if vmap else model(x)

    return stable_jit(f)(x)


def check_in_closure(model, x, traces, traced, calls=4, vmap=False):
    """``model`` called in a redefined closure ``calls`` times, each result against
    eager, then the traces so far against ``traces`` (``traced``: the fixture)."""
    eager = jax.vmap(model)(x) if vmap else model(x)
    for _ in range(calls):
        np.testing.assert_allclose(call_in_closure(model, x, vmap), eager, rtol=1e-6)
    assert traced() == traces


def nnx_mlp(nnx, layers):
    """A flax nnx model of ``layers`` 3×3 Linear layers, a static ``power`` and an
    optional ``extra`` parameter, as a user writes one."""

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.layers = nnx.List([nnx.Linear(3, 3, rngs=rngs) for _ in range(layers)])
            self.power = 1

        def __call__(self, x):
            for layer in self.layers:
                x = jnp.tanh(layer(x))
            out = x**self.power
            return out + self.extra[...] if hasattr(self, "extra") else out

    return Model(nnx.Rngs(0))


def eqx_stack(eqx):
    """An equinox module class: ``layers`` applied in turn, the first ``depth`` (static)."""

    class Stack(eqx.Module):
        layers: tuple
        depth: int = eqx.field(static=True)

        def __call__(self, x):
            for layer in self.layers[: self.depth]:
                x = jnp.tanh(layer(x))
            return x

    return Stack
