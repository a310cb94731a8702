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


_COUNTED = ("hits", "traces", "compiles", "trace_seconds", "compile_seconds")


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
        self.retired = dict.fromkeys(_COUNTED, 0)  # the counts of dropped entries
        # Hashes of the distinct keys compiled, by structure (see
        # _describe.structure): the recompile limit counts within one.
        self.keys: dict[int, set[int]] = {}
        self.descriptions: collections.deque = collections.deque(maxlen=16)
        self.values: dict[str, dict[str, None]] = {}  # part → distinct summaries seen
        self.warned = False

    def retire(self, entry, evicted: bool) -> None:
        """Keeps the counts of an entry of this function that is being dropped."""
        for field in _COUNTED:
            self.retired[field] += getattr(entry, field)
        self.evictions += evicted


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
    totals = dict.fromkeys(_COUNTED, 0)
    misses = evictions = 0
    for t in tags:
        s = STATS.get(t)
        if s is None:
            continue
        misses += s.misses
        evictions += s.evictions
        for field in _COUNTED:
            totals[field] += s.retired[field]
    entries = [e for e in live_entries if tag is None or e.tag == tag]
    for e in entries:
        for field in _COUNTED:
            totals[field] += getattr(e, field)
    return CacheInfo(
        hits=totals["hits"],
        misses=misses,
        traces=totals["traces"],
        compiles=totals["compiles"],
        entries=len(entries),
        evictions=evictions,
        trace_seconds=totals["trace_seconds"],
        compile_seconds=totals["compile_seconds"],
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
        entry.compiles += 1
        entry.compile_seconds += seconds
        _TLS.entry = None


monitoring.register_event_duration_secs_listener(_on_event)
