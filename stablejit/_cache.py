"""The cache: static key → one long-lived ``jax.jit`` of a canonical function.

The canonical function takes the lifted leaves as its first arguments, rebuilds
the user's callable around them (at trace time only) and calls it. One
``jax.jit`` object per entry means JAX's own C++ fast path serves every later
call; constructing ``jax.jit`` per call would cost ~0.2 ms.

Entries hold static key parts and compiled code, never the user's callable or
its arrays: at trace time, the canonical function finds the callable being
called in its caller's frame.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import jax

from . import _bake, _explain, _stats
from ._config import config
from ._fingerprint import Lift, fingerprint, substitute
from ._sinks import Snapshot
from ._stable import aux_holds_callables, by_structure, unwrap
from ._statics import rebox, unbox

_LOCK = threading.RLock()

TRACE_LOCK = threading.RLock()
"""Held while user code runs at trace time, and while a missed key is
recomputed: a trace may mutate what keys read (a trace counter), so a key
computed during another thread's trace could name a state that is never seen
again. Reentrant, because a trace may call other stablejit functions."""
CLOCK = itertools.count()

CACHE: dict[Any, Entry] = {}
"""Every static key (aliases included) → its entry."""
_ENTRIES: dict[Entry, None] = {}


class Entry:
    """One cached computation: a ``jax.jit`` of a canonical function."""

    __slots__ = (
        "jitted",
        "ready",
        "keys",
        "tag",
        "last_used",
        "hits_then",
        "hits",
        "traces",
        "compiles",
        "trace_seconds",
        "compile_seconds",
        "stats",
        "leaf_labels",
        "signature",
        "__weakref__",
    )

    def __init__(self, key, tag):
        self.jitted: Callable | None = None
        # ``jitted`` once a first call has returned: what the hot path calls.
        self.ready: Callable | None = None
        self.keys = [key]
        self.tag = tag
        # Recency for eviction (see _evict_locked): a hit only counts itself.
        self.last_used = next(CLOCK)
        self.hits_then = 0
        self.hits = self.traces = self.compiles = 0
        self.trace_seconds = self.compile_seconds = 0.0
        self.stats = None  # the function's _stats.Stats
        self.leaf_labels: list[str] = []  # names of the lifted arrays, for messages
        self.signature = None  # the arguments' shapes at the last trace


_ENTRY_CODES: set = set()


def entry_point(func):
    """Marks ``func`` as a caller of canonical functions (see :func:`current_callable`)."""
    _ENTRY_CODES.add(func.__code__)
    return func


def current_callable():
    """The callable whose stablejit call is being traced.

    Read from the nearest stablejit entry point on the Python stack, where it
    is ``self._fun``: tracing is synchronous, so that frame is there, and the
    hot path pays nothing to publish the callable.
    """
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code in _ENTRY_CODES:
            return frame.f_locals["self"]._fun
        frame = frame.f_back
    raise RuntimeError(
        "stablejit internal error: a canonical function was traced outside of a stablejit call"
    )


def make_canonical(
    entry: Entry,
    n_leaves: int,
    name: str,
    qualname: str,
    signature,
    lift: Lift = None,
    baked: frozenset[int] = frozenset(),
    adaptive: bool = False,
) -> Callable:
    """The function jitted for ``entry``: rebuilds the callable and calls it.

    Its first ``n_leaves`` arguments are the lifted leaves (a key fixes how
    many): as plain top-level arrays they cost JAX's dispatch nothing extra.
    ``adaptive``: whether the entry may switch to passing its arguments by
    structure (see _stable.by_structure).
    """

    def canonical(*args, **kwargs):
        fn = current_callable()
        rest, kwargs = unwrap(args[n_leaves:], kwargs)
        if adaptive and entry.traces and entry.ready is entry.jitted is not None:
            if aux_holds_callables((rest, kwargs)):
                # A retrace with a callable in an argument's static fields:
                # JAX compared it by identity. From the next call on, keyed
                # by fingerprint.
                entry.ready = by_structure(entry.jitted, n_leaves)
        call = unbox(fn, rest, kwargs)
        subject = fn if call is None else call
        with TRACE_LOCK:
            entry.traces += 1
            start = time.perf_counter()
            snapshot = Snapshot(subject)
            try:
                new, rebuilder = substitute(subject, args[:n_leaves], lift, baked)
                try:
                    if call is None:
                        out = new(*rest, **kwargs)
                    else:
                        new_rest, new_kwargs = rebox(rest, kwargs, new.values)
                        out = new.fn(*new_rest, **new_kwargs)
                    if rebuilder is not None:
                        rebuilder.check_writes()
                        # The output may be the program's own containers, which
                        # get their arrays back below: JAX must see them now.
                        out = jax.tree_util.tree_map(_same, out)
                finally:
                    if rebuilder is not None:
                        rebuilder.restore()
            finally:
                # A failed trace's writes are side channels too: the retry
                # after a lift_scalars fallback must not see a new key.
                if snapshot.commit():
                    _alias_after_trace(entry, subject, lift)
            entry.trace_seconds += time.perf_counter() - start
        stats = entry.stats
        if stats is not None:
            signature = _explain.signature(args[:n_leaves], args[n_leaves:], kwargs)
            _explain.on_retrace(entry, stats.name, stats.location, signature)
        _stats.traced(entry)
        return out

    canonical.__name__ = name
    canonical.__qualname__ = qualname
    if signature is not None:
        canonical.__signature__ = signature
    return canonical


def _same(x):
    return x


def _alias_after_trace(entry: Entry, fn, lift: Lift) -> None:
    """Also files ``entry`` under ``fn``'s key now that tracing made sinks
    (``fn``: what the call is keyed on, see _statics).

    The key computed before the trace still walked the state the trace
    mutated (see :mod:`stablejit._sinks`); later calls key without it.
    """
    first = entry.keys[0]
    post_key = first[:-1] + (fingerprint(fn, lift)[0],)
    if post_key in CACHE:
        return
    with _LOCK:
        if entry in _ENTRIES and post_key not in CACHE:
            CACHE[post_key] = entry
            entry.keys.append(post_key)


STATIC_SCALARS: set = set()
"""``(options, function key)`` of variants whose lifted Python numbers failed
to trace (see ``lift_scalars``): keyed with static numbers instead."""


def keep_scalars_static(keys, entry: Entry) -> None:
    with _LOCK:
        STATIC_SCALARS.update(keys)
    drop(entry)


def drop(entry: Entry) -> None:
    """Drops ``entry``, if it is still cached."""
    with _LOCK:
        if entry in _ENTRIES:
            _drop_locked(entry)


def lookup(key) -> Entry | None:
    """The live entry of ``key``, if any."""
    entry = CACHE.get(key)
    return entry if entry is not None and entry.jitted is not None else None


def live_entries() -> list[Entry]:
    with _LOCK:
        return list(_ENTRIES)


def get_or_create(key, tag, build: Callable[[Entry], Callable]) -> Entry:
    """Returns the entry of ``key``, creating it with ``build`` on a miss."""
    with _LOCK:
        entry = CACHE.get(key)
        if entry is None or entry.jitted is None:
            entry = Entry(key, tag)
            entry.jitted = build(entry)
            CACHE[key] = entry
            _ENTRIES[entry] = None
            _evict_locked(config.cache_size)
        return entry


def _evict_locked(size: int) -> None:
    """Drops the least recently used entries beyond ``size``.

    Recency is read off the hit counters, so a hit pays for nothing else: an
    entry hit since the previous eviction counts as used now (the CLOCK
    approximation of LRU, resolved at evictions).
    """
    if len(_ENTRIES) <= size:
        return
    for e in _ENTRIES:
        if e.hits != e.hits_then:
            e.hits_then = e.hits
            e.last_used = next(CLOCK)
    while len(_ENTRIES) > size:
        _drop_locked(min(_ENTRIES, key=lambda e: e.last_used), evicted=True)


def _drop_locked(entry: Entry, evicted: bool = False) -> None:
    if _ENTRIES.pop(entry, False) is None:
        _stats.retire(entry, evicted)
    for k in entry.keys:
        if CACHE.get(k) is entry:
            del CACHE[k]
    if entry.jitted is not None:
        entry.jitted.clear_cache()
    entry.jitted = entry.ready = None


def evict_to_size() -> None:
    with _LOCK:
        _evict_locked(config.cache_size)


def clear(tag=None) -> int:
    """Drops the entries with ``tag`` (all entries if None); returns how many."""
    with _LOCK:
        victims = [e for e in _ENTRIES if tag is None or e.tag == tag]
        if tag is None:
            STATIC_SCALARS.clear()
            _bake.clear()
        for e in victims:
            _drop_locked(e)
        _stats.forget(tag)
        return len(victims)


def num_entries() -> int:
    return len(_ENTRIES)
