"""The general call functions: what a ``StableJitted`` calls as
``call(fn, opts, *args, **kwargs)`` until its code's fast-path record has a
call function of its own (:mod:`.hot`), and what every call function falls
back to. A call keys the callable (its fast-path record, else the full
walk), finds the entry and calls its ``jax.jit`` with the leaves first;
a miss traces once (:func:`first_call`) through :func:`stage`, the one
staging path, which ``trace``/``lower``/``eval_shape`` take too (as JAX's
stages all come from its ``jit_trace``); everything else (fallbacks, the
uncached path) is in :mod:`.miss`. The call functions are JAX api
boundaries, so that JAX's traceback filtering hides stablejit's frames.
"""

from __future__ import annotations

import os
import types
import weakref

import jax
from jax._src import source_info_util, traceback_util

from .. import _native as native
from .._config import config
from .._diagnostics import stats
from .._fingerprint import sinks
from .._fingerprint.code import INFO as CODE_INFO
from .._fingerprint.codegen import CALL_FILENAME
from .._fingerprint.rebuild import RebuildMismatch
from .._fingerprint.records import remember
from . import miss, persist
from .cache import CACHE, serve
from .canonical import TRACE_LOCK, Restructured, entry_point, ready_for
from .hot import install
from .keys import Unkeyable, call_key, fingerprint_of, is_plain
from .statics import WithStatics, hash_as_jax_jit, release

_FunctionType = types.FunctionType

# A user's traceback shows the user's code, as under jax.jit: JAX's traceback
# filtering (when it is on) hides stablejit's frames as it hides JAX's own,
# below the outermost call function, a JAX api_boundary. And the source
# locations JAX records and reports (an operation's, the call site its
# cache-miss explanations name) are the user's frames, not stablejit's.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
traceback_util.register_exclusion(_PACKAGE)
traceback_util.register_exclusion(CALL_FILENAME)  # the call functions compiled for records
source_info_util.register_exclusion(_PACKAGE + os.sep)  # a prefix: not a sibling stablejit_x
source_info_util.register_exclusion(CALL_FILENAME)
boundary = traceback_util.api_boundary


@boundary
@entry_point
def call(fn, opts, /, *args, **kwargs):
    """A call of ``stable_jit(fn)`` (the general path; a redefined closure's
    record compiles its own, see :mod:`.hot`)."""
    try:
        if type(fn) is _FunctionType:
            # A redefined closure whose children are all immutable values or
            # arrays: re-check them by identity and go straight to its entry
            # (see the fingerprint's records); the full walk below is the general case.
            info = CODE_INFO.get(id(fn.__code__))
            fast = info and info.fast.front
            if fast is not None:
                entry = fast.entries.get(opts)
                if entry is not None:
                    ready = entry.ready
                    leaves = []
                    if ready is not None and fast.match(fn, leaves, sinks.SINKS) is not None:
                        entry.hits += 1
                        if fast.call is None and fast.compiled:
                            install(fast, fn.__code__, info.fast, call, plainly, fn, leaves)
                        if leaves:
                            return ready(*leaves, *args, **kwargs)
                        return ready(*args, **kwargs)
                served = _another_record(info.fast, fn, opts)
                if served is not None:
                    ready, leaves = served
                    return ready(*leaves, *args, **kwargs)
        try:
            key, leaves, entry, ready = _keyed(opts, fn, len(args))
        except Unkeyable as e:
            return miss.unkeyable(fn, opts, e)(*args, **kwargs)
        if ready is not None:
            if type(fn) is _FunctionType and is_plain(key):
                # (Not for baked variants: a record re-checks arrays by type.)
                records = CODE_INFO[id(fn.__code__)].fast
                fast = records.front
                if fast is not None and fast.key is fingerprint_of(key):  # just built, or found
                    fast.entries[opts] = entry
                    # (Found by the walk among several: its call function, for
                    # when another is the front, see _another_record.)
                    if fast.call is None and fast.compiled:
                        install(fast, fn.__code__, records, call, plainly, fn, leaves)
            return ready(*leaves, *args, **kwargs)
        return first_call(fn, opts, args, kwargs)
    except RebuildMismatch as e:  # a trace, first or for new shapes
        return plainly(fn, opts, e, args, kwargs)


def _another_record(records, fn, opts):
    """``(ready, leaves)`` from another record of ``fn``'s code than the front
    (one code keyed at several shapes: a closure built over each of several
    models, called in turns) whose call function is the accelerator's and
    whose checks hold on ``fn``, now the front; else None. Its checks in C:
    the walk would try its match in Python, which for a large model costs
    more than the call."""
    record_call = native.NATIVE and native.NATIVE.RecordCall
    for record in records.others:
        if type(record.call) is not record_call:
            continue
        entry = record.entries.get(opts)
        ready = entry.ready if entry is not None else None
        if ready is None:
            continue
        got = record.call.check(fn)
        if got is not None:
            entry.hits += 1
            remember(records, record)
            return ready, got[0]
    return None


def _keyed(opts, subject, n_args):
    """``(key, leaves, entry, ready)`` of a call keyed by the full walk:
    ``ready`` (the entry's compiled function, the hit counted) is None on a
    miss. Raises :class:`Unkeyable`, at once for a code refused before."""
    refused = miss.refusal(subject)
    if refused is not None:
        raise refused
    key, leaves = call_key(opts, subject, n_args)
    entry = CACHE.get(key)
    ready = entry.ready if entry is not None else None
    if ready is not None:
        entry.hits += 1
    return key, leaves, entry, ready


@boundary
@entry_point
def call_statics(fn, opts, /, *args, **kwargs):
    """A call of a ``stable_jit`` with static arguments, which join the key
    (see :mod:`.statics`): no per-code fast path, as they change per call."""
    opts = opts.for_function(fn)
    try:
        subject, cargs, ckwargs = opts.statics.box(fn, args, kwargs)
        try:
            _, leaves, _, ready = _keyed(opts, subject, len(cargs))
        except Unkeyable as e:
            release(cargs, ckwargs)
            return miss.unkeyable(fn, opts, e)(*args, **kwargs)
        if ready is not None:
            try:
                return ready(*leaves, *cargs, **ckwargs)
            finally:
                release(cargs, ckwargs)
        return first_call(fn, opts, args, kwargs)
    except RebuildMismatch as e:  # a trace, first or for new shapes
        return plainly(fn, opts, e, args, kwargs)


class Staging:
    """A call keyed and its entry staged (see :func:`stage`): the entry's
    ``jax.jit`` and what it is called with, the leaves first; or, for a call
    that runs as a plain ``jax.jit`` (not keyable, or past the recompile
    limit), that ``plain`` jit, called with the user's arguments."""

    __slots__ = ("entry", "jitted", "leaves", "args", "kwargs", "traced", "plain", "disk")

    def __init__(self, entry=None, leaves=(), args=(), kwargs=None, plain=None):
        self.entry = entry
        self.jitted = entry.jitted if entry is not None else None
        self.leaves = leaves
        self.args = args
        self.kwargs = kwargs or {}
        self.plain = plain
        self.traced = None  # the entry's jax.stages.Traced, if traced here
        self.disk = None  # (persistent key, JAX's cache hits before) to save it under


@entry_point
def stage(fn, opts, args, kwargs, *, trace_ready=True, load=None) -> Staging:
    """The one path from a call to its traced entry, as ``jax.jit``'s stages
    all come from its ``jit_trace``: a call that missed, and ``trace``,
    ``lower``, ``eval_shape``. Keys the call, finds or makes its entry and
    traces it under :data:`TRACE_LOCK` (racing first calls trace once),
    unless the entry is ready and ``trace_ready`` is false, or ``load``
    (given the staging) made it ready. A first trace that failed for what
    was lifted is re-keyed and retried (see :func:`.miss.fall_back`); a
    rebuild mismatch is raised to the caller."""
    opts = opts.for_function(fn)
    static_scalars = False
    while True:
        with TRACE_LOCK:
            # The hot path's key may have been read while another thread's
            # trace was mutating state (see TRACE_LOCK): read it with none running.
            subject, cargs, ckwargs = prepare(fn, opts, args, kwargs)
            _refuse_as_jax_jit(fn, subject)
            try:
                refused = miss.refusal(subject)
                if refused is not None:
                    raise refused
                key, leaves = call_key(opts, subject, len(cargs), static_scalars)
            except Unkeyable as e:
                release(cargs, ckwargs)
                return Staging(plain=miss.unkeyable(fn, opts, e))
            entry = miss.entry_for(fn, opts, key, leaves, cargs, subject)
            if entry is None:
                release(cargs, ckwargs)
                return Staging(plain=miss.uncached(fn, opts))
            staging = Staging(entry, leaves, cargs, ckwargs)
            if entry.ready is not None and not trace_ready:
                return staging
            if load is not None and load(staging, opts, key):
                return staging
            try:
                staging.traced = entry.jitted.trace(*leaves, *cargs, **ckwargs)
                return staging
            except Exception as e:
                if isinstance(e, RebuildMismatch):
                    release(cargs, ckwargs)
                    raise  # the caller runs the call plainly, or again
                retry = miss.fall_back(fn, opts, e, key, entry, leaves, cargs, subject)
                if retry is None:
                    release(cargs, ckwargs)
                    raise
                static_scalars = static_scalars or retry


def _refuse_as_jax_jit(fn, subject) -> None:
    """Raises, on a miss, what ``jax.jit`` raises on every call that stablejit's
    keys would let through: for a callable that cannot be weakly referenced,
    weakref's TypeError (jax.jit's trace cache holds the callable weakly), and
    an error a static argument's ``__hash__`` raises (see
    :func:`.statics.hash_as_jax_jit`). Nothing that raised here is cached, so
    every later call of it misses and raises again, as under ``jax.jit``."""
    if type(fn) is not _FunctionType:
        weakref.ref(fn)
    if type(subject) is WithStatics:
        hash_as_jax_jit(subject.values)


def _load(staging: Staging, opts, key) -> bool:
    """Makes a new entry ready from the persistent cache, if it holds it;
    else notes where to save it (see :mod:`.persist`)."""
    entry = staging.entry
    if entry.ready is not None:
        return False
    jax_hits = persist.jax_cache_hits()
    disk = miss.disk_key(opts, key, staging.leaves, staging.args, staging.kwargs)
    compiled = disk and persist.load(disk)
    if compiled:
        serve(entry, persist.loaded_ready(compiled, entry.jitted, entry, disk))
        return True
    staging.disk = (disk, jax_hits) if disk else None
    return False


@entry_point
def first_call(fn, opts, args, kwargs):
    """A call that missed: stages its entry (traced once), then calls it."""
    if jax.config.jax_disable_jit:
        # As jax.jit: the function runs as Python, once (no trace to key).
        return fn(*args, **kwargs)
    load = _load if config.persistent_dir is not None else None
    s = stage(fn, opts, args, kwargs, trace_ready=False, load=load)
    if s.plain is not None:
        return s.plain(*args, **kwargs)
    entry, jitted, leaves, cargs, ckwargs = s.entry, s.jitted, s.leaves, s.args, s.kwargs
    ready = entry.ready
    try:
        if ready is not None:  # ready meanwhile, or loaded from disk
            return ready(*leaves, *cargs, **ckwargs)
        out = jitted(*leaves, *cargs, **ckwargs)
        if s.disk:
            # JAX kept the trace, lowering and executable: this costs
            # the serialization only.
            compiled = jitted.lower(*leaves, *cargs, **ckwargs).compile()
            persist.save(s.disk[0], compiled, s.disk[1])
    finally:
        stats.done_compiling()
        release(cargs, ckwargs)
    if entry.jitted is jitted:  # not evicted meanwhile
        serve(entry, ready_for(entry, jitted))
    return out


def general(opts):
    """The general call function for ``opts``: :func:`call`, or with static
    arguments :func:`call_statics`."""
    return call if opts.statics is None else call_statics


def prepare(fn, opts, args, kwargs):
    """``(subject, args, kwargs)``: what the call is keyed on, and the
    arguments as the canonical jit takes them (see :mod:`.statics`)."""
    if opts.statics is None:
        return fn, args, kwargs
    return opts.statics.box(fn, args, kwargs)


def plainly(fn, opts, error, args, kwargs):
    """After a trace whose rebuild did not replay its key walk: the call
    as a plain ``jax.jit`` runs it (see the runtime's ``miss.mismatched``);
    after one that switched its entry to arguments by structure, the call
    made again (by structure, so never switching twice)."""
    if type(error) is Restructured:
        return general(opts)(fn, opts, *args, **kwargs)
    miss.mismatched(fn, opts, error)
    stats.done_compiling()
    return miss.uncached(fn, opts)(*args, **kwargs)
