"""``StableJitted``: the callable ``stable_jit`` returns, and its hot path.

A ``StableJitted`` is a ``functools.partial`` of a call function: the general
one here, or a redefined closure's own (:mod:`.hot`). A call keys the callable
(the fingerprint, or for a redefined closure its fast-path record), finds the
entry, and calls its ``jax.jit`` with the leaves first. Everything else — a
miss, a first call, a fallback — is in :mod:`.miss`; the key's layout is
:mod:`.keys`'.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Generic, ParamSpec, TypeVar

from .._config import config
from .._diagnostics import stats
from .._diagnostics.describe import display_name, location
from .._diagnostics.stats import CacheInfo
from .._fingerprint import sinks
from .._fingerprint.code import INFO as CODE_INFO
from .._fingerprint.code import code_info
from .._fingerprint.kind import Kind, register_kind
from .._fingerprint.rebuild import RebuildMismatch
from . import cache, miss, persist
from .cache import CACHE
from .canonical import TRACE_LOCK, Restructured, entry_point, ready_for
from .hot import install
from .keys import Unkeyable, call_key, fingerprint_of, is_plain
from .options import Options
from .statics import release

P = ParamSpec("P")
R = TypeVar("R")
_FunctionType = types.FunctionType


def check_callable(fun) -> None:
    if not callable(fun):
        raise TypeError(f"stable_jit expects a callable, got {type(fun).__name__}: {fun!r}")
    target = fun.__func__ if isinstance(fun, types.MethodType) else fun
    code = getattr(target, "__code__", None)
    if isinstance(code, types.CodeType) and code_info(code).is_generator:
        raise TypeError(
            f"stable_jit cannot compile {getattr(fun, '__qualname__', fun)!r}: it is a "
            "generator or coroutine function, whose calls return an iterator rather than "
            "arrays."
        )


class StableJitted(functools.partial, Generic[P, R]):
    """A callable compiled like ``jax.jit``, cached by structure.

    Returned by :func:`stable_jit`; see there. Underneath it is a
    ``functools.partial`` of stablejit's call function, the callable and its
    options (made by ``stable_jit``, not by hand), so that a call reaches the
    call function (a redefined closure's own, once its checks are compiled)
    with no Python frame of the wrapper's own in between.

    Example:
        >>> import jax.numpy as jnp
        >>> from stablejit import stable_jit
        >>> f = stable_jit(lambda x: x * 2)
        >>> f.lower(jnp.ones(2)).compile()(jnp.ones(2))
        Array([2., 2.], dtype=float32)
    """

    __slots__ = ()

    @property
    def _fun(self):
        return self.args[0]

    @property
    def _opts(self):
        return self.args[1]

    # -- functools.wraps without the per-construction cost
    @property
    def __wrapped__(self):
        return self.args[0]

    def __getattr__(self, name):
        # functools.wraps without its per-construction cost.
        if name in ("__name__", "__qualname__"):
            return getattr(self._fun, name, type(self._fun).__name__)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self):
        fn = self._fun
        info = self.cache_info()
        return (
            f"<stable_jit of {display_name(fn)}{location(fn)}: {info.entries} compiled, "
            f"{info.hits} hits, {info.misses} misses, {info.traces} traces>"
        )

    def __reduce__(self):
        return wrap, (self._fun, self._opts)

    def __get__(self, obj, objtype=None):
        # Decorating a method: bind like a function would, then jit the bound
        # method (keyed by the structure of ``obj``).
        if obj is None:
            return self
        return wrap(types.MethodType(self._fun, obj), self._opts)

    @entry_point
    def _stage(self, method: str, args, kwargs, static_scalars=False):
        fn, opts = self._fun, self._opts
        with TRACE_LOCK:
            subject, cargs, ckwargs = _prepare(fn, opts, args, kwargs)
            try:
                key, leaves = call_key(opts, subject, len(cargs), static_scalars)
            except Unkeyable as e:
                return miss.unkeyable(fn, opts, e, method, args, kwargs), []
            entry = miss.entry_for(fn, opts, key, leaves, cargs, subject)
            if entry is None:
                return getattr(miss.uncached(fn, opts), method)(*args, **kwargs), []
            try:
                return getattr(entry.jitted, method)(*leaves, *cargs, **ckwargs), leaves
            except Restructured:
                return self._stage(method, args, kwargs, static_scalars)
            except RebuildMismatch as e:
                miss.mismatched(fn, opts, e)
                return getattr(miss.uncached(fn, opts), method)(*args, **kwargs), []
            except Exception as e:
                retry = miss.fall_back(fn, opts, e, key, entry, leaves, cargs, subject)
                if retry is None:
                    raise
                static_scalars = static_scalars or retry
            finally:
                stats.done_compiling()
            return self._stage(method, args, kwargs, static_scalars)

    def trace(self, *args, **kwargs) -> Staged:
        """Traces like ``jax.jit(f).trace``; the result's ``lower()`` and its
        ``compile()`` keep the lifted arrays, so the compiled function takes the
        user's arguments only."""
        traced, leaves = self._stage("trace", args, kwargs)
        return Staged(traced, leaves)

    def lower(self, *args, **kwargs) -> Staged:
        """Lowers like ``jax.jit(f).lower``; see :meth:`trace`."""
        lowered, leaves = self._stage("lower", args, kwargs)
        return Staged(lowered, leaves)

    def eval_shape(self, *args, **kwargs):
        """Output shapes and dtypes, like ``jax.jit(f).eval_shape``."""
        return self._stage("eval_shape", args, kwargs)[0]

    def clear_cache(self) -> None:
        """Drops the compiled entries of this function (all redefinitions of
        it), and its counters."""
        ftag = miss.function_tag(self._fun, self._opts)
        cache.clear(ftag)
        stats.forget(ftag)

    def cache_info(self) -> CacheInfo:
        """The counters of this function, all its redefinitions together."""
        return stats.cache_info(cache.live_entries(), miss.function_tag(self._fun, self._opts))


class Staged:
    """A ``jax.stages`` object (Traced, Lowered, Compiled) with the lifted leaves
    bound as the first argument, so it takes the user's arguments only."""

    __slots__ = ("_stage", "_leaves")

    def __init__(self, stage, leaves):
        self._stage = stage
        self._leaves = leaves

    def lower(self, *args, **kwargs) -> Staged:
        return Staged(self._stage.lower(*args, **kwargs), self._leaves)

    def compile(self, *args, **kwargs) -> Staged:
        return Staged(self._stage.compile(*args, **kwargs), self._leaves)

    def __call__(self, *args, **kwargs):
        return self._stage(*self._leaves, *args, **kwargs)

    @property
    def args_info(self):
        args, kwargs = self._stage.args_info
        return args[len(self._leaves) :], kwargs

    def __getattr__(self, name):
        return getattr(self._stage, name)

    def __repr__(self):
        return f"<stablejit {type(self._stage).__name__}: {self._stage!r}>"


def wrap(fun: Callable, opts: Options) -> StableJitted:
    """``fun`` compiled with ``opts`` (checked)."""
    check_callable(fun)
    return made(fun, opts)


def made(fun: Callable, opts: Options) -> StableJitted:
    """A :class:`StableJitted` of ``fun`` (unchecked): a partial of the call
    function of ``fun``'s code if its fast path has one, else of the general
    :func:`_call` (or, with static arguments, :func:`_call_statics`)."""
    call = _general(opts)
    if call is _call:
        call = fast_call(fun) or call
    return partial_of(call, fun, opts)


def fast_call(fun: Callable):
    """``fun``'s code's fast-path call function (see :mod:`.hot`), or None."""
    if type(fun) is _FunctionType:
        info = CODE_INFO.get(id(fun.__code__))
        if info is not None:
            return info.fast.call
    return None


def partial_of(call, fun: Callable, opts: Options) -> StableJitted:
    """The :class:`StableJitted` partial of ``(call, fun, opts)``."""
    self = StableJitted(call, fun, opts)
    # Without a __dict__ of its own, functools.partial(self, x) would unwrap it.
    self.__dict__  # noqa: B018
    return self


@entry_point
def _call(fn, opts, /, *args, **kwargs):
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
                            install(fast, fn.__code__, info.fast, _call, _plainly)
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
        return _first_call(fn, opts, args, kwargs)
    except RebuildMismatch as e:  # a trace, first or for new shapes
        return _plainly(fn, opts, e, args, kwargs)


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


@entry_point
def _call_statics(fn, opts, /, *args, **kwargs):
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
        return _first_call(fn, opts, args, kwargs)
    except RebuildMismatch as e:  # a trace, first or for new shapes
        return _plainly(fn, opts, e, args, kwargs)


@entry_point
def _first_call(fn, opts, args, kwargs, static_scalars=False):
    """A call that missed: finds or makes its entry, and traces it once."""
    with TRACE_LOCK:
        # The hot path's key may have been read while another thread's
        # trace was mutating state (see TRACE_LOCK): read it with none running.
        subject, cargs, ckwargs = _prepare(fn, opts, args, kwargs)
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
            return _first_call(fn, opts, args, kwargs, static_scalars)
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


def _general(opts):
    """The general call function for ``opts``: :func:`_call`, or with static
    arguments :func:`_call_statics`."""
    return _call if opts.statics is None else _call_statics


def _prepare(fn, opts, args, kwargs):
    """``(subject, args, kwargs)``: what the call is keyed on, and the
    arguments as the canonical jit takes them (see :mod:`.statics`)."""
    if opts.statics is None:
        return fn, args, kwargs
    return opts.statics.box(fn, args, kwargs)


def _plainly(fn, opts, error, args, kwargs):
    """After a trace whose rebuild did not replay its key walk: the call
    as a plain ``jax.jit`` runs it (see the runtime's ``miss.mismatched``);
    after one that switched its entry to arguments by structure, the call
    made again (by structure, so never switching twice)."""
    if type(error) is Restructured:
        return _general(opts)(fn, opts, *args, **kwargs)
    miss.mismatched(fn, opts, error)
    stats.done_compiling()
    return miss.uncached(fn, opts)(*args, **kwargs)


class _StableKind(Kind):
    """A ``stable_jit`` wrapper reached from another callable."""

    name = "stable_jit function"

    def key(self, w, f):
        return (StableJitted, w.walk(f._fun), f._opts.key)

    def children(self, w, f):
        return [("stable_jit of", f._fun)]

    def node_token(self, f):
        return f._opts.key

    def rebuild(self, r, f, i):
        return made(r.walk(f._fun), f._opts)


register_kind(StableJitted, _StableKind())
