"""What a trace wrote: snapshots of the mutable state a function reaches.

A trace is bracketed by a :class:`Snapshot` (see :mod:`.sinks`): what changed
between its start and :meth:`Snapshot.commit` becomes a side channel. Commit
also says whether a write was to a *channel* (a list, a dict, a closure cell,
a global) or only to an object's own attributes: a cache entry stays
reachable by the state before the trace in the second case only (see the
runtime's ``canonical._refile_after_trace``).
"""

from __future__ import annotations

import functools
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

CHANNEL = "channel"
"""What :meth:`Snapshot.commit` returns when the trace wrote a list, a dict,
a cell or a global: state that code outside the function reads back."""

STATE = "state"
"""What it returns when the trace wrote only objects' attributes (a module's
lazy set-up, a cache or a counter in its ``__dict__``)."""


class Snapshot:
    """The contents of the mutable state reachable from ``fn``, before a trace."""

    def __init__(self, fn):
        parts: list[tuple[object, tuple | None, str]] = []
        current = [None]  # the value being walked: the one a first visit is of
        # Whether the value being walked was reached as a channel or as an
        # object's state (an attribute, or inside one), and what its own
        # contents are reached as: a function's cells and globals and a
        # partial's arguments are channels, an object's attributes its
        # state, and a plain container's items are reached as it was.
        reached, inside = [CHANNEL], [CHANNEL]

        def on_first(_):
            v = current[0]
            if isinstance(v, (list, dict)):
                parts.append((v, None, reached[0]))
            elif isinstance(v, types.FunctionType):
                # Where the function's walk reads (see .parts), sunk or not:
                # its cells, and the names it reads from its globals.
                names = []
                for what, name, holder, _ in places(v, code_info(v.__code__), w):
                    if what is CELL:
                        parts.append((holder, None, CHANNEL))
                    elif what is GLOBAL:
                        names.append(name)
                parts.append((v.__globals__, tuple(names), CHANNEL))
            else:
                d = classify(v).watched(v)
                if d is not None:
                    parts.append((d, None, STATE))

        class _Recorder(KeyWalker):
            __slots__ = ()
            exact = False
            sees_classes = True

            def walk(self, v):
                outer = current[0], reached[0], inside[0]
                current[0], reached[0] = v, inside[0]
                # (by type: isinstance reads __class__, which an object may refuse)
                if issubclass(type(v), _CALLABLES):
                    inside[0] = CHANNEL
                elif not issubclass(type(v), _PLAIN):
                    inside[0] = STATE
                try:
                    # KeyWalker.walk, inlined (see Plan.walk).
                    return (KEYS.get(type(v)) or key_of(v))(self, v)
                finally:
                    current[0], reached[0], inside[0] = outer

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
        self._before = [_contents(obj, names) for obj, names, _ in parts]

    def commit(self) -> str | None:
        """Makes what changed since the snapshot a sink; returns CHANNEL if a
        list, dict, cell or global changed, else STATE if an object's
        attributes did, else None."""
        changes = []
        wrote = None
        for (obj, names, kind), before in zip(self._parts, self._before, strict=True):
            after = _contents(obj, names)
            if after == before:
                continue
            if wrote is not CHANNEL:
                wrote = kind
            if isinstance(obj, dict):
                changed = before.keys() | after.keys()
                changes.append(
                    (obj, frozenset(k for k in changed if before.get(k) != after.get(k)))
                )
            else:
                changes.append((obj, ALL))
        if changes:
            add(changes)
        return wrote


_ATOMS = (bool, int, float, complex, str, bytes, type(None))
_PLAIN = (list, dict, tuple, set, frozenset)
_CALLABLES = (types.FunctionType, functools.partial)


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
