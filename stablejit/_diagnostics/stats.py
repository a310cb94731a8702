"""Counters: per function (all its redefinitions together) and overall.

A hit costs one increment on its entry; everything else is counted on the
slow paths (misses, traces, compiles) and summed up only when asked for.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, NamedTuple

from jax import monitoring

from .._registry import on_clear
from . import events


class CacheInfo(NamedTuple):
    """What the cache did for one function, or for all of them.

    Example:
        >>> import jax.numpy as jnp, stablejit
        >>> f = stablejit.stable_jit(lambda x: x + 1)
        >>> _ = f(jnp.ones(2)); _ = f(jnp.ones(2))
        >>> info = stablejit.cache_info(f)
        >>> info.misses, info.hits, info.traces
        (1, 1, 1)
    """

    hits: int
    """Calls that found the entry of their key (JAX may still have retraced
    it for new argument shapes: those count in ``traces``)."""
    misses: int
    """Calls whose key had no entry: a new variant was traced."""
    traces: int
    """Times the function's Python code ran to build a computation (misses,
    and retraces for new argument shapes within an entry)."""
    compiles: int
    """XLA compilations."""
    entries: int
    """Entries alive now."""
    evictions: int
    """Entries dropped to keep the cache within ``config.cache_size``."""
    trace_seconds: float
    compile_seconds: float
    verified: int = 0
    """Hits traced again by verify mode (``config.verify``) and compared."""
    mismatches: int = 0
    """Of those, the hits whose entry ran another program than the function
    traces now: stale results verify mode caught (and ran afresh)."""


_COUNTED = ("traces", "compiles", "trace_seconds", "compile_seconds", "verified", "mismatches")
"""Counted per entry (in its ``Counts``), besides its hits."""


class Counts:
    """One cache entry's counters, and what its explanations read: written
    by this module alone (an entry's ``counts``)."""

    __slots__ = (*_COUNTED, "stats", "leaf_labels", "signature")

    def __init__(self):
        self.traces = self.compiles = self.verified = self.mismatches = 0
        self.trace_seconds = self.compile_seconds = 0.0
        self.stats: Stats | None = None  # the function's counters
        self.leaf_labels: list[str] = []  # names of the lifted arrays, for messages
        self.signature = None  # the arguments' shapes at the last trace


def trace_began(entry) -> None:
    entry.counts.traces += 1


def trace_ended(entry, seconds: float) -> None:
    entry.counts.trace_seconds += seconds


def verified(entry, same: bool) -> None:
    """Counts a hit of ``entry`` that verify mode traced again: the same
    program, or not."""
    entry.counts.verified += 1
    entry.counts.mismatches += not same


def attach(entry, s: Stats) -> None:
    """Files ``entry`` under its function's counters ``s``, whose newest
    description names its lifted arrays."""
    entry.counts.stats = s
    entry.counts.leaf_labels = [name for name, _ in s.descriptions[-1].lifted]


def new_signature(entry, signature):
    """Notes the arguments' ``signature`` at ``entry``'s trace; returns the last one."""
    old, entry.counts.signature = entry.counts.signature, signature
    return old


def _counted(entry) -> dict:
    counts = entry.counts
    return {"hits": entry.hits, **{field: getattr(counts, field) for field in _COUNTED}}


def retire(entry, evicted: bool) -> None:
    """Keeps the counts of ``entry``, which is being dropped, in its function's."""
    s = entry.counts.stats
    if s is not None:
        for field, n in _counted(entry).items():
            s.retired[field] += n
        s.evictions += evicted


class Stats:
    """The counters of one function, and what the explanations need."""

    __slots__ = (
        "name",
        "location",
        "misses",
        "evictions",
        "retired",
        "keys",
        "descriptions",
        "values",
        "warned",
    )

    def __init__(self, name: str, location: str):
        self.name = name
        self.location = location
        self.misses = 0
        self.evictions = 0
        self.retired = dict.fromkeys(("hits", *_COUNTED), 0)  # the counts of dropped entries
        # Hashes of the distinct keys compiled, by structure (see
        # _describe.structure): the recompile limit counts within one.
        self.keys: dict[int, set[int]] = {}
        self.descriptions: collections.deque = collections.deque(maxlen=16)
        self.values: dict[str, dict[str, None]] = {}  # part → distinct summaries seen
        self.warned = False


STATS: dict[Any, Stats] = {}
_LOCK = threading.Lock()


def stats_for(tag, name: str, location: str) -> Stats:
    with _LOCK:
        s = STATS.get(tag)
        if s is None:
            s = STATS[tag] = Stats(name, location)
        return s


def cache_info(live_entries: list, tag=None) -> CacheInfo:
    """Sums the counters of ``tag`` (every function if None), whose entries
    now alive are among ``live_entries``."""
    tags = list(STATS) if tag is None else [tag]
    totals = dict.fromkeys(("hits", *_COUNTED), 0)
    misses = evictions = 0
    for t in tags:
        s = STATS.get(t)
        if s is None:
            continue
        misses += s.misses
        evictions += s.evictions
        for field, n in s.retired.items():
            totals[field] += n
    entries = [e for e in live_entries if tag is None or e.tag == tag]
    for e in entries:
        for field, n in _counted(e).items():
            totals[field] += n
    return CacheInfo(
        hits=totals["hits"],
        misses=misses,
        traces=totals["traces"],
        compiles=totals["compiles"],
        entries=len(entries),
        evictions=evictions,
        trace_seconds=totals["trace_seconds"],
        compile_seconds=totals["compile_seconds"],
        verified=totals["verified"],
        mismatches=totals["mismatches"],
    )


@on_clear
def forget(tag=None) -> None:
    """Drops the counters of ``tag`` (all if None)."""
    with _LOCK:
        if tag is None:
            STATS.clear()
        else:
            STATS.pop(tag, None)


# -- compile attribution: a trace is followed, in the same thread, by its
# compilation; the entry that traced last in this thread gets the next one.
_TLS = threading.local()


def traced(entry) -> None:
    _TLS.entry = entry


def done_compiling() -> None:
    _TLS.entry = None


def _on_event(event: str, seconds: float, **_) -> None:
    if event != events.COMPILE:
        return
    entry = getattr(_TLS, "entry", None)
    if entry is not None:
        entry.counts.compiles += 1
        entry.counts.compile_seconds += seconds
        _TLS.entry = None


monitoring.register_event_duration_secs_listener(_on_event)
