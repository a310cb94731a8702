"""Side channels: what a function writes while it is being traced.

Test suites and libraries count traces by mutating something the traced
function can see: ``TRACES.append(1)``, ``GLOBAL["count"] += 1``, ``nonlocal
n; n += 1``. If such state were keyed, every trace would change the key of
every later call, and variants would retrace forever. So a trace is bracketed
by a :class:`Snapshot`; the lists, dict items, globals and closure cells it
changed become *sinks*, which keys name by identity, not contents, from then
on (see :func:`sink_key`). ``jax.jit`` never re-reads such state either;
unlike ``jax.jit``, everything else stays keyed.
"""

from __future__ import annotations

import threading
import types

from ._code import code_info
from ._idref import IdRef

ALL = None
"""Sink marker: the whole list or cell is a side channel."""

SINK = type("Sink", (), {"__repr__": lambda self: "<sink>"})()
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
version (keys and rebuilds must agree on what they skip).
"""

_LOCK = threading.Lock()


def _add(changes: list[tuple[object, frozenset | None]]) -> None:
    global SINKS
    with _LOCK:
        new = dict(SINKS)
        for obj, names in changes:
            old = new.get(id(obj))
            if old is not None and old[0] is obj:
                names = ALL if names is ALL or old[1] is ALL else old[1] | names
            new[id(obj)] = (obj, names)
        SINKS = new


class Snapshot:
    """The contents of the mutable state reachable from ``fn``, before a trace."""

    def __init__(self, fn):
        from ._fingerprint import KeyWalker, Visits

        parts: list[tuple[object, tuple | None]] = []
        current = [None]  # the value being walked: the one a first visit is of

        def on_first(_):
            v = current[0]
            if isinstance(v, (list, dict)):
                parts.append((v, None))
            elif isinstance(v, types.FunctionType):
                parts.extend((cell, None) for cell in v.__closure__ or ())
                parts.append((v.__globals__, code_info(v.__code__).global_names))

        class _Recorder(KeyWalker):
            __slots__ = ()
            exact = False

            def walk(self, v):
                outer, current[0] = current[0], v
                try:
                    return super().walk(v)
                finally:
                    current[0] = outer

        w = _Recorder()
        w.seen = Visits(on_first, lambda ref: None)
        w.walk(fn)
        self._parts = parts
        self._before = [_contents(obj, names) for obj, names in parts]

    def commit(self) -> bool:
        """Makes what changed since the snapshot a sink; True if anything did."""
        changes = []
        for (obj, names), before in zip(self._parts, self._before, strict=True):
            after = _contents(obj, names)
            if after == before:
                continue
            if isinstance(obj, dict):
                changed = before.keys() | after.keys()
                changes.append(
                    (obj, frozenset(k for k in changed if before.get(k) != after.get(k)))
                )
            else:
                changes.append((obj, ALL))
        if changes:
            _add(changes)
        return bool(changes)


_ATOMS = (bool, int, float, complex, str, bytes, type(None))


def _shallow(v):
    # Containers by identity: a change inside one is recorded on that one
    # alone, so a counter in ``obj.__dict__`` does not make every closure
    # cell that holds ``obj`` a sink too.
    if type(v) in _ATOMS:
        return (type(v), repr(v))
    return IdRef(v)


def _contents(obj, names):
    if isinstance(obj, list):
        return [_shallow(x) for x in obj]
    if isinstance(obj, types.CellType):
        try:
            return _shallow(obj.cell_contents)
        except ValueError:
            return "<empty>"
    if names is None:
        return {k: _shallow(x) for k, x in list(obj.items())}
    return {k: _shallow(obj[k]) for k in names if k in obj}
