"""The general call functions: what a ``StableJitted`` calls as
``call(fn, opts, *args, **kwargs)`` until its code's fast-path record has a
call function of its own (:mod:`.hot`), and what every call function falls
back to. A call keys the callable (its fast-path record, else the full
walk), finds the entry and calls its ``jax.jit`` with the leaves first;
a miss traces once (:func:`first_call`); everything else (fallbacks, the
uncached path) is in :mod:`.miss`.
"""

from __future__ import annotations

import os
import types

import jax
from jax._src import traceback_util

from .._config import config
from .._diagnostics import stats
from .._fingerprint import sinks
from .._fingerprint.checker import CALL_FILENAME
from .._fingerprint.code import INFO as CODE_INFO
from .._fingerprint.rebuild import RebuildMismatch
from . import miss, persist
from .cache import CACHE
from .canonical import TRACE_LOCK, Restructured, entry_point, ready_for
from .hot import install
from .keys import Unkeyable, call_key, fingerprint_of, is_plain
from .statics import release

_FunctionType = types.FunctionType

# A user's traceback shows the user's code, as under jax.jit: JAX's traceback
# filtering (when it is on) hides stablejit's frames as it hides JAX's own,
# below the outermost call function, a JAX api_boundary (and in the source
# locations JAX records for each operation).
traceback_util.register_exclusion(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
traceback_util.register_exclusion(CALL_FILENAME)  # the call functions compiled for records
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
            # (see the fingerprint's fastpath); the full walk below is the general case.
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
                            install(fast, fn.__code__, info.fast, call, plainly)
                        if leaves:
                            return ready(*leaves, *args, **kwargs)
                        return ready(*args, **kwargs)
        try:
            key, leaves, entry, ready = _keyed(opts, fn, len(args))
        except Unkeyable as e:
            return miss.unkeyable(fn, opts, e, "__call__", args, kwargs)
        if ready is not None:
            if type(fn) is _FunctionType and is_plain(key):
                # (Not for baked variants: a record re-checks arrays by type.)
                fast = CODE_INFO[id(fn.__code__)].fast.front
                if fast is not None and fast.key is fingerprint_of(key):  # just built
                    fast.entries[opts] = entry
            return ready(*leaves, *args, **kwargs)
        return first_call(fn, opts, args, kwargs)
    except RebuildMismatch as e:  # a trace, first or for new shapes
        return plainly(fn, opts, e, args, kwargs)


def _keyed(opts, subject, n_args):
    """``(key, leaves, entry, ready)`` of a call keyed by the full walk:
    ``ready`` (the entry's compiled function, the hit counted) is None on a
    miss. Raises :class:`Unkeyable`."""
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
    try:
        subject, cargs, ckwargs = opts.statics.box(fn, args, kwargs)
        try:
            _, leaves, _, ready = _keyed(opts, subject, len(cargs))
        except Unkeyable as e:
            release(cargs, ckwargs)
            return miss.unkeyable(fn, opts, e, "__call__", args, kwargs)
        if ready is not None:
            try:
                return ready(*leaves, *cargs, **ckwargs)
            finally:
                release(cargs, ckwargs)
        return first_call(fn, opts, args, kwargs)
    except RebuildMismatch as e:  # a trace, first or for new shapes
        return plainly(fn, opts, e, args, kwargs)


@entry_point
def first_call(fn, opts, args, kwargs, static_scalars=False):
    """A call that missed: finds or makes its entry, and traces it once."""
    if jax.config.jax_disable_jit:
        # As jax.jit: the function runs as Python, once (no trace to key).
        return fn(*args, **kwargs)
    with TRACE_LOCK:
        # The hot path's key may have been read while another thread's
        # trace was mutating state (see TRACE_LOCK): read it with none running.
        subject, cargs, ckwargs = prepare(fn, opts, args, kwargs)
        try:
            key, leaves = call_key(opts, subject, len(cargs), static_scalars)
        except Unkeyable as e:
            release(cargs, ckwargs)
            return miss.unkeyable(fn, opts, e, "__call__", args, kwargs)
        entry = miss.entry_for(fn, opts, key, leaves, cargs, subject)
        if entry is None:
            return miss.uncached(fn, opts)(*args, **kwargs)
        jitted = entry.jitted
        disk = None
        if entry.ready is None and config.persistent_dir is not None:
            jax_hits = persist.jax_cache_hits()
            disk = miss.disk_key(opts, key, leaves, cargs, ckwargs)
            compiled = disk and persist.load(disk)
            if compiled:
                ready = entry.ready = persist.loaded_ready(compiled, jitted, entry, disk)
                return ready(*leaves, *cargs, **ckwargs)
        if entry.ready is None:
            # Trace under the lock, so racing first calls trace once; JAX
            # caches the trace, and the call below compiles outside the lock.
            try:
                jitted.trace(*leaves, *cargs, **ckwargs)
            except RebuildMismatch:
                release(cargs, ckwargs)
                raise  # to the call function, which runs the call plainly
            except Exception as e:
                retry = miss.fall_back(fn, opts, e, key, entry, leaves, cargs, subject)
                if retry is None:
                    raise
                static_scalars = static_scalars or retry
                jitted = None
        if jitted is None:
            return first_call(fn, opts, args, kwargs, static_scalars)
    try:
        out = jitted(*leaves, *cargs, **ckwargs)
        if disk:
            # JAX kept the trace, lowering and executable: this costs
            # the serialization only.
            compiled = jitted.lower(*leaves, *cargs, **ckwargs).compile()
            persist.save(disk, compiled, jax_hits)
    finally:
        stats.done_compiling()
        release(cargs, ckwargs)
    if entry.jitted is jitted:  # not evicted meanwhile
        entry.ready = ready_for(entry, jitted)
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
