"""Plain helper functions shared by several test modules (fixtures live in conftest.py)."""

import os
from pathlib import Path

import jax

from stablejit._diagnostics import events
from stablejit._fingerprint.walk import fingerprint


def key(f):
    """The key stablejit's fingerprint gives ``f``."""
    return fingerprint(f)[0]


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
