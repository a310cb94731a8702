"""What a trace wrote: snapshots of the mutable state a function reaches.

A trace is bracketed by a :class:`Snapshot` (see :mod:`.sinks`): what changed
between its start and :meth:`Snapshot.commit` becomes a side channel.
"""

from __future__ import annotations

import logging
import types

from .._markers import IdRef
from .classify import classify
from .code import code_info
from .kind import KEYS
from .parts import CELL, GLOBAL, places
from .sinks import ALL, add
from .walk import KeyWalker, Visits, key_of

_LOG = logging.getLogger("stablejit")


class Snapshot:
    """The contents of the mutable state reachable from ``fn``, before a trace."""

    def __init__(self, fn):
        parts: list[tuple[object, tuple | None]] = []
        current = [None]  # the value being walked: the one a first visit is of

        def on_first(_):
            v = current[0]
            if isinstance(v, (list, dict)):
                parts.append((v, None))
            elif isinstance(v, types.FunctionType):
                # Where the function's walk reads (see .parts), sunk or not:
                # its cells, and the names it reads from its globals.
                names = []
                for what, name, holder, _ in places(v, code_info(v.__code__), w):
                    if what is CELL:
                        parts.append((holder, None))
                    elif what is GLOBAL:
                        names.append(name)
                parts.append((v.__globals__, tuple(names)))
            else:
                d = classify(v).watched(v)
                if d is not None:
                    parts.append((d, None))

        class _Recorder(KeyWalker):
            __slots__ = ()
            exact = False
            sees_classes = True

            def walk(self, v):
                outer, current[0] = current[0], v
                try:
                    # KeyWalker.walk, inlined (see Plan.walk).
                    return (KEYS.get(type(v)) or key_of(v))(self, v)
                finally:
                    current[0] = outer

        w = _Recorder()
        w.seen = Visits(on_first, lambda ref: None)
        try:
            w.walk(fn)
        except RecursionError:
            # What the key walk reached but this one cannot: the state seen
            # so far is snapshotted; a write beyond it keys anew (a retrace).
            _LOG.info("stablejit: the state %r reaches is too deep to snapshot whole", fn)
        finally:
            # The walker and on_first refer to each other: unlinked, what the
            # walk visited (the function itself) dies with its last user, not
            # at the next collection (the cache's eviction reads liveness).
            w.seen = None
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
            add(changes)
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
