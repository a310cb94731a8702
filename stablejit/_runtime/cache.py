"""The cache: static key → one long-lived ``jax.jit`` of a canonical function.

The canonical function (see :mod:`.canonical`) takes the lifted leaves as its
first arguments, rebuilds the user's callable around them (at trace time
only) and calls it. One ``jax.jit`` object per entry means JAX's own C++ fast
path serves every later call; constructing ``jax.jit`` per call would cost
~0.2 ms. Entries hold static key parts and compiled code, never the user's
callable or its arrays. Bounded (LRU, ``config.cache_size``), thread-safe.

The bound counts compiled executables, not entries: an entry holds one per
argument signature it compiled. Executables are what runs out. Plain
``jax.jit`` frees a function's executables when the function dies; ours
outlive the functions that made them (that is the point), and on CPU each
one maps its code into the process: an optax test suite's thousand entries
held ~25 mappings per executable, and XLA crashed compiling once the process
reached Linux's limit of 65,530 mappings.

So the bound is on what outlives its function. An entry whose function (or
wrapper) is still alive is held as ``jax.jit`` holds that function's
executables, neither counted nor evicted: a module-level function's variants
are never compiled again because other code made many closures.

And what outlives its function without being used again (a test's closure,
never redefined) is held on probation: at most a quarter of the bound, least
recently made first out. Held executables take places in JAX's own bounded
caches, which eager operations share: a test suite's thousand one-off
closures held to the full bound pushed those out, and numpyro's suite
compiled 0.6 % more than under plain ``jax.jit``. On probation, an entry
also leaves JAX's dispatch cache (see :mod:`.jaxcaches`).
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .._config import config
from .._diagnostics.stats import Counts, retire
from .._native import NATIVE
from .._registry import Memo, on_clear
from .jaxcaches import HeldKeys, forget, suspend
from .trace_warnings import Warned

LOCK = threading.RLock()
"""Guards the cache's tables."""

CLOCK = itertools.count()

CACHE: dict[Any, Entry] = {}
"""Every static key (aliases included) → its entry."""
ENTRIES: dict[Entry, None] = {}
"""The live entries, each once."""


class Entry(object if NATIVE is None else NATIVE.Counted):
    """One cached computation: a ``jax.jit`` of a canonical function.

    Its fields have one writer each:

    * this module: ``jitted`` (the ``jax.jit``), ``ready`` (what the hot
      path calls; see :func:`serve`), ``keys`` (the keys it is or was filed
      under; see :func:`alias`), ``tag`` (its function's), and ``policy``;
    * its canonical function: ``held``, whose keys JAX's trace cache holds
      for it (see :class:`.jaxcaches.HeldKeys`), which eviction also forgets;
    * the hot path: ``hits``, a C field where the accelerator is built (its
      base, ``Counted``), which a native hit counts without making an int;
    * the diagnostics: ``counts`` (see their ``Counts``);
    * :mod:`.trace_warnings`: ``warned``.
    """

    __slots__ = (
        "jitted",
        "ready",
        "keys",
        "tag",
        "policy",
        *(("hits",) if NATIVE is None else ()),
        "counts",
        "warned",
        "held",
        "__weakref__",
    )

    def __init__(self, key, tag):
        self.jitted: Callable | None = None
        # ``jitted`` once a first call has returned: what the hot path calls.
        self.ready: Callable | None = None
        self.keys = [key]
        self.tag = tag
        self.policy = Policy()
        self.hits = 0
        self.counts = Counts()
        self.warned = Warned()
        self.held = HeldKeys()


class Policy:
    """What the cache's bound decides by (see the module's docstring)."""

    __slots__ = ("last_used", "hits_then", "owner", "hits_at_death", "suspended")

    def __init__(self):
        # Recency for eviction (see _evict_locked): a hit only counts itself.
        self.last_used = next(CLOCK)
        self.hits_then = 0
        # The callable the entry was made for, weakly: alive, it pins the
        # entry; gone, the hits then tell whether another has used it since.
        self.owner: weakref.ref | None = None
        self.hits_at_death: int | None = None
        # Whether it left JAX's dispatch cache on probation (see
        # :mod:`.jaxcaches`); a call takes it off probation for good.
        self.suspended = False


def serve(entry: Entry, ready: Callable | None) -> None:
    """Makes ``ready`` what the hot path calls for ``entry``."""
    entry.ready = ready


def alias(entry: Entry, key) -> None:
    """Also files ``entry`` under ``key``, unless ``key`` has an entry or
    ``entry`` was dropped."""
    if key in CACHE:
        return
    with LOCK:
        if entry in ENTRIES and key not in CACHE:
            CACHE[key] = entry
            entry.keys.append(key)


def refile(entry: Entry, old, new) -> None:
    """Files ``entry`` under ``new`` instead of ``old``, unless ``new`` has an
    entry or ``entry`` was dropped; ``old`` leaves the cache either way (it
    stays first in ``entry.keys``, which name every key it was filed under)."""
    with LOCK:
        if CACHE.get(old) is entry:
            del CACHE[old]
    alias(entry, new)


STATIC_SCALARS = Memo(4096)
"""``(options, function key)`` of variants whose lifted Python numbers failed
to trace (see ``lift_scalars``): keyed with static numbers instead."""


def keep_scalars_static(keys, entry: Entry) -> None:
    with LOCK:
        for k in keys:
            STATIC_SCALARS.put(k, None)
    drop(entry)


def drop(entry: Entry) -> None:
    """Drops ``entry``, if it is still cached."""
    with LOCK:
        if entry in ENTRIES:
            _drop_locked(entry)


def lookup(key) -> Entry | None:
    """The live entry of ``key``, if any."""
    entry = CACHE.get(key)
    return entry if entry is not None and entry.jitted is not None else None


def live_entries() -> list[Entry]:
    with LOCK:
        return list(ENTRIES)


def get_or_create(key, tag, build: Callable[[Entry], Callable]) -> Entry:
    """Returns the entry of ``key``, creating it with ``build`` on a miss."""
    with LOCK:
        entry = CACHE.get(key)
        if entry is None or entry.jitted is None:
            entry = Entry(key, tag)
            entry.jitted = build(entry)
            CACHE[key] = entry
            ENTRIES[entry] = None
            _evict_locked(config.cache_size, keep=entry)
        return entry


def set_owner(entry: Entry, fn) -> None:
    """Notes the callable ``entry`` was made for (see the module's docs),
    if it can be referenced weakly; a first owner stays."""
    if entry.policy.owner is None:
        try:
            entry.policy.owner = weakref.ref(fn, functools.partial(_orphaned, weakref.ref(entry)))
        except TypeError:
            pass


def _orphaned(entry_ref, _) -> None:
    entry = entry_ref()
    if entry is not None:
        entry.policy.hits_at_death = entry.hits


def _weight(entry: Entry) -> int:
    """The executables ``entry`` holds (one, until its first compile)."""
    return max(1, entry.counts.compiles)


def _pinned(entry: Entry) -> bool:
    owner = entry.policy.owner
    return owner is not None and owner() is not None


def _on_probation(entry: Entry) -> bool:
    """Whether nothing has used ``entry`` since its function died (of an
    entry not pinned: the death noted is its owner's last)."""
    return entry.policy.hits_at_death == entry.hits


def _evict_locked(size: int, keep: Entry | None = None) -> None:
    """Drops the least recently used entries whose functions are gone,
    never ``keep`` (the entry just created), while those on probation hold
    more than a quarter of ``size`` executables or all of them more than
    ``size``.

    Recency is read off the hit counters, so a hit pays for nothing else: an
    entry hit since the previous eviction counts as used now (the CLOCK
    approximation of LRU, resolved at evictions).
    """
    for e in ENTRIES:
        # JAX's trace keys of functions all dead go (see .jaxcaches.HeldKeys):
        # here, not as the last one dies, which may be inside JAX's own cache.
        if e.held.orphaned() and e.jitted is not None:
            e.held.forget(e.jitted.__wrapped__)
    loose = [e for e in ENTRIES if not _pinned(e)]
    held = sum(map(_weight, loose))
    idle = [e for e in loose if _on_probation(e)]
    for e in idle:
        if not e.policy.suspended and e.jitted is not None:
            e.policy.suspended = True
            suspend(e.jitted)
    held_idle, idle_size = sum(map(_weight, idle)), max(1, size // 4)
    if held <= size and held_idle <= idle_size:
        return
    for e in loose:
        if e.hits != e.policy.hits_then:
            e.policy.hits_then = e.hits
            e.policy.last_used = next(CLOCK)
    for e in sorted(idle, key=_last_used):
        if held_idle <= idle_size:
            break
        if e is not keep:
            held_idle -= _weight(e)
            held -= _weight(e)
            _drop_locked(e, evicted=True)
    for e in sorted(loose, key=_last_used):
        if held <= size:
            break
        if e is not keep and e in ENTRIES:
            held -= _weight(e)
            _drop_locked(e, evicted=True)


def _last_used(entry: Entry) -> int:
    return entry.policy.last_used


def _drop_locked(entry: Entry, evicted: bool = False) -> None:
    if ENTRIES.pop(entry, False) is None:
        retire(entry, evicted)
    for k in entry.keys:
        if CACHE.get(k) is entry:
            del CACHE[k]
    if entry.jitted is not None:
        forget(entry.jitted)
    entry.jitted = entry.ready = None


def _evict_to(size: int) -> None:
    with LOCK:
        _evict_locked(size)


config.on_cache_size(_evict_to)


def clear(tag=None) -> int:
    """Drops the entries with ``tag`` (all entries if None); returns how many."""
    with LOCK:
        victims = [e for e in ENTRIES if tag is None or e.tag == tag]
        for e in victims:
            _drop_locked(e)
        return len(victims)


on_clear(clear)
