"""Side channels: what a function writes while it is being traced.

Test suites and libraries count traces by mutating something the traced
function can see: ``TRACES.append(1)``, ``GLOBAL["count"] += 1``, ``nonlocal
n; n += 1``. If such state were keyed, every trace would change the key of
every later call, and variants would retrace forever. So a trace is bracketed
by a snapshot (see :mod:`.snapshot`); the lists, dict items, globals and
closure cells it changed become *sinks*, which keys name by identity, not
contents, from then on (see :func:`sink_key`). ``jax.jit`` never re-reads
such state either; unlike ``jax.jit``, everything else stays keyed.
"""

from __future__ import annotations

import threading

from .._markers import IdRef, sentinel
from .._native import NATIVE
from .._registry import on_clear

ALL = None
"""Sink marker: the whole list or cell is a side channel."""

SINK = sentinel("sink")
"""Marks the key of a value left out because it is a side channel."""


def sink_key(obj) -> tuple:
    """The key of side channel ``obj`` (a list, a cell, a dict with left-out
    items): which object it is, not what it holds. Two functions whose side
    channels are different objects may have traced with different values in
    them (``nonlocal n; n = float(n)`` reads the value it rewrites), so they
    must not share a key."""
    return (SINK, IdRef(obj))


def is_sink_key(k) -> bool:
    return type(k) is tuple and len(k) == 2 and k[0] is SINK


SINKS: dict[int, tuple[object, frozenset | None]] = {}
"""id(container) → (container, names left out of keys, or ALL).

Replaced, never mutated, so a walk that reads it once sees one consistent
version (keys and rebuilds must agree on what they skip), and a fast-path
record made under one version knows it by identity. Replaced only by
:func:`_publish`.
"""

_LOCK = threading.Lock()


def _publish(new: dict) -> None:
    """Makes ``new`` the side channels' table, for the C accelerator's
    checks too: they compare a pointer it holds, not ``SINKS``'s binding
    here, which would cost a dict lookup per call."""
    global SINKS
    SINKS = new
    if NATIVE is not None:
        NATIVE.publish_sinks(new)


_publish(SINKS)


def add(changes: list[tuple[object, frozenset | None]]) -> None:
    with _LOCK:
        new = dict(SINKS)
        for obj, names in changes:
            old = new.get(id(obj))
            if old is not None and old[0] is obj:
                names = ALL if names is ALL or old[1] is ALL else old[1] | names
            new[id(obj)] = (obj, names)
        _publish(new)


@on_clear
def forget() -> None:
    """Forgets every side channel (``stablejit.clear_cache()``): their
    containers are held no longer, and a later trace finds again those it
    still writes, as the first trace of a process does."""
    with _LOCK:
        _publish({})


def sink_of(w, v):
    """The names of ``v`` that are side channels in walk ``w`` (``ALL``: the
    whole of it), or False."""
    sinks = w.sinks
    if sinks:
        entry = sinks.get(id(v))
        if entry is not None and entry[0] is v:
            return entry[1]
    return False
