"""Every memo stablejit keeps, in one registry: bounded, and cleared together.

``stablejit.clear_cache()`` calls :func:`clear_all`, which empties each
:class:`Memo` still alive and runs each function given to :func:`on_clear`
(the cache itself, counters): the ``cache_clearing_funs`` idea of JAX.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

_MEMOS: weakref.WeakSet = weakref.WeakSet()
_CLEARS: list[Callable[[], None]] = []
_LOCK = threading.Lock()


class Memo(dict):
    """A dict that keeps at most ``size`` items (the oldest go first) and is
    emptied by :func:`clear_all`.

    Reads are plain ``dict`` reads, so a memo costs a hot path nothing;
    only :meth:`put` bounds it.
    """

    def __init__(self, size: int):
        super().__init__()
        self.size = size
        with _LOCK:
            _MEMOS.add(self)

    def put(self, key, value) -> Any:
        """Stores ``value`` under ``key`` (evicting the oldest item beyond
        ``size``) and returns it."""
        self[key] = value
        while len(self) > self.size:
            try:
                self.pop(next(iter(self)))
            except (StopIteration, RuntimeError, KeyError):  # another thread got there
                break
        return value

    __hash__ = object.__hash__  # for the WeakSet: a memo is one object


def on_clear(fn: Callable[[], None]) -> Callable[[], None]:
    """Registers ``fn`` to run on :func:`clear_all`; returns it (a decorator)."""
    with _LOCK:
        _CLEARS.append(fn)
    return fn


def clear_all() -> None:
    """Empties every memo and runs every registered clearing function."""
    with _LOCK:
        memos, clears = list(_MEMOS), list(_CLEARS)
    for memo in memos:
        memo.clear()
    for fn in clears:
        fn()
