"""Side channels: what a function writes while it is being traced.

Test suites and libraries count traces by mutating something the traced
function can see: ``TRACES.append(1)``, ``GLOBAL["count"] += 1``, ``nonlocal
n; n += 1``. If such state were keyed, every trace would change the key of
every later call, and nothing would ever hit. So a trace is bracketed by a
:class:`Snapshot`; the list entries, dict items, globals and closure cells it
changed become *sinks*, which keys leave out from then on (arrays in a sink
list are still lifted). ``jax.jit`` never re-reads such state either; unlike
``jax.jit``, everything else stays keyed.
"""

from __future__ import annotations

import threading
import types

ALL = None
"""Sink marker: the whole list or cell is a side channel."""

SINKS: dict[int, tuple[object, frozenset | None]] = {}
"""id(container) → (container, names left out of keys, or ALL)."""

_LOCK = threading.Lock()


def _add(obj, names) -> None:
    with _LOCK:
        old = SINKS.get(id(obj))
        if old is not None and old[0] is obj:
            names = ALL if names is ALL or old[1] is ALL else old[1] | names
        SINKS[id(obj)] = (obj, names)


class Snapshot:
    """The contents of every mutable container reachable from ``fn``."""

    def __init__(self, fn):
        from ._fingerprint import KeyWalker

        self._key = lambda v: KeyWalker().walk(v)
        self._parts: list[tuple[object, object]] = []

        snapshot = self

        class _Recorder(KeyWalker):
            __slots__ = ()

            def enter(self, v):
                ref = super().enter(v)
                if ref is None:
                    snapshot._record(v)
                return ref

        _Recorder().walk(fn)
        self._before = [self._contents(obj) for obj, _ in self._parts]

    def _record(self, v):
        if isinstance(v, (list, dict)):
            self._parts.append((v, None))
        elif isinstance(v, types.FunctionType):
            for cell in v.__closure__ or ():
                self._parts.append((cell, None))
            self._parts.append((v.__globals__, v))

    def _contents(self, obj):
        key = self._key
        if isinstance(obj, list):
            return key(obj)
        if isinstance(obj, types.CellType):
            try:
                return key(obj.cell_contents)
            except ValueError:
                return "<empty>"
        return {k: key(x) for k, x in obj.items() if type(k) is str or not isinstance(obj, dict)}

    def commit(self) -> bool:
        """Marks what changed since the snapshot as sinks; True if anything did."""
        changed = False
        for (obj, _), before in zip(self._parts, self._before, strict=True):
            after = self._contents(obj)
            if after == before:
                continue
            changed = True
            if isinstance(obj, dict):
                names = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
                _add(obj, frozenset(names))
            else:
                _add(obj, ALL)
        return changed
