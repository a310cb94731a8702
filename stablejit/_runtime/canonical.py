"""The canonical function of an entry: what JAX traces for it.

It takes the lifted leaves as its first arguments, finds the callable being
called (in its caller's Python frame: entries never hold it), substitutes
the leaves into it at trace time (see the fingerprint's ``rebuild.substitute``),
records what the trace wrote as side channels, and calls it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import threading
import time
import types
from collections.abc import Callable

import jax

from .._config import config
from .._diagnostics import explain, stats
from .._fingerprint.codegen import CALL_FILENAME
from .._fingerprint.rebuild import RebuildMismatch, substitute
from .._fingerprint.snapshot import CHANNEL, Snapshot
from .._fingerprint.walk import fingerprint
from .._native import NATIVE
from . import trace_warnings, verify
from .argtrees import aux_holds_callables, by_structure, unwrap
from .cache import Entry, alias, live_entries, refile, serve
from .options import Lift
from .statics import compared_by_identity, rebox, unbox

TRACE_LOCK = threading.RLock()
"""Held while user code runs at trace time, and while a missed key is
recomputed: a trace may mutate what keys read (a trace counter), so a key
computed during another thread's trace could name a state that is never seen
again. Reentrant, because a trace may call other stablejit functions."""

_HEADROOM = 1000


@contextlib.contextmanager
def _headroom():
    """A deeper recursion limit while a trace walks what the key walk walked:
    it runs further down the stack (under JAX's tracing), and a structure
    that keyed fine must not fail there."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(limit + _HEADROOM)
    try:
        yield
    finally:
        if sys.getrecursionlimit() == limit + _HEADROOM:  # not changed meanwhile
            sys.setrecursionlimit(limit)


class Restructured(RebuildMismatch):
    """Raised out of a trace whose entry switched to passing its arguments by
    structure (see :mod:`.argtrees`): the call is to be made again."""


_ENTRY_CODES: set = set()


def entry_point(func):
    """Marks ``func`` as a caller of canonical functions (see :func:`current_callable`)."""
    _ENTRY_CODES.add(func.__code__)
    return func


def current_callable(entry: Entry):
    """The callable whose stablejit call of ``entry`` is being traced.

    A native call function (see :mod:`.hot`) has no frame: it publishes the
    callable with the entry whose ``jax.jit`` it calls, for as long as the
    call runs. If that is ``entry``, the trace is taken as that call's: a
    Python call of the same entry traced inside it has the same key, and a
    key is what the trace depends on (rebuilt around the trace's own leaves,
    either callable is the same function, as for any hit of the entry).
    Else it is read from the nearest stablejit entry point on the
    Python stack (a call function compiled for a record counts as one),
    where it is the local ``fn``: tracing is synchronous, so that frame is
    there, and the hot path pays nothing to publish the callable.
    """
    native_fn, native_entry = NATIVE.current() if NATIVE is not None else (None, None)
    if native_entry is entry:
        return native_fn
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code in _ENTRY_CODES or code.co_filename == CALL_FILENAME:
            return frame.f_locals["fn"]
        frame = frame.f_back
    if native_fn is not None:  # called with no Python frame below it
        return native_fn
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
    on_traced: Callable[[Entry, tuple, tuple, dict], None] | None = None,
    source: Source | None = None,
) -> Callable:
    """The function jitted for ``entry``: rebuilds the callable and calls it.

    Its first ``n_leaves`` arguments are the lifted leaves (a key fixes how
    many): as plain top-level arrays they cost JAX's dispatch nothing extra.
    ``adaptive``: whether the entry may switch to passing its arguments by
    structure (see :mod:`.argtrees`). ``on_traced(entry, leaves, args,
    kwargs)`` runs after each trace (the diagnostics: counters, explanations).
    ``source``: how JAX is to name the function (see :class:`Source`).
    """

    def canonical(*args, **kwargs):
        fn = current_callable(entry)
        # verify mode's trace (see .verify) is not the cache's: uncounted, unexplained
        again = verify.verifying(entry)
        if not again:
            entry.held.tracing(canonical, fn)
        rest, kwargs = unwrap(args[n_leaves:], kwargs)
        if (
            adaptive
            and not again
            and entry.counts.traces
            and unsampled(entry.ready) is entry.jitted is not None
        ):
            if aux_holds_callables((rest, kwargs)):
                # A retrace with a callable in an argument's static fields:
                # JAX compared it by identity. From now on, keyed by
                # fingerprint, this call too (a trace finished here would
                # compile a variant that the next call no longer uses).
                serve(entry, by_structure(entry.jitted, n_leaves))
                raise Restructured
        call = unbox(fn, rest, kwargs)
        subject = fn if call is None else call
        with TRACE_LOCK, _headroom():
            if not again:
                stats.trace_began(entry)
            start = time.perf_counter()
            snapshot = Snapshot(subject)
            try:
                try:
                    new, rebuilder = substitute(subject, args[:n_leaves], lift, baked)
                except RebuildMismatch as mismatch:
                    mismatch.entry = entry  # which variant to run plainly (see miss.mismatched)
                    raise
                try:
                    with trace_warnings.recording() as shown:
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
                wrote = snapshot.commit()
                if wrote is not None:
                    _refile_after_trace(entry, subject, lift, wrote)
            if again:
                return out
            stats.trace_ended(entry, time.perf_counter() - start)
            if shown or entry.warned.callers is not None:
                _warned(entry, [fn, *compared_by_identity(rest, kwargs)], shown)
        if on_traced is not None:
            on_traced(entry, args[:n_leaves], args[n_leaves:], kwargs)
        return out

    canonical.__name__ = name
    canonical.__qualname__ = qualname
    if source is not None:
        # JAX names the function in its errors ("f at file.py:12 traced for
        # jit returned ...") from what inspect.unwrap reaches.
        canonical.__wrapped__ = source
    canonical.__signature__ = signature if signature is not None else _OWN_SIGNATURE
    return canonical


_OWN_SIGNATURE = inspect.Signature(
    [
        inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
        inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
    ]
)
"""A canonical function's own signature: set, so that JAX's ``inspect.signature``
does not follow ``__wrapped__`` to its :class:`Source`."""


class Source:
    """What JAX reads to name a traced function in its messages (its
    ``fun_sourceinfo``): the user's function's code and name, never the
    function itself, which an entry must not keep alive. A callable without
    code of its own JAX names by its ``str()``: a built-in function's, else
    ``"<unknown>"``."""

    __slots__ = ("__code__", "__name__", "_text")

    def __init__(self, fun):
        while isinstance(fun, functools.partial):
            fun = fun.func
        try:
            fun = inspect.unwrap(fun)
            code, name = fun.__code__, fun.__name__
        except Exception:  # noqa: BLE001 - no code of its own
            code = name = None
        if isinstance(code, types.CodeType) and isinstance(name, str):
            self.__code__ = code
            self.__name__ = name
        # (Only a built-in function's text names it; other objects' str() may
        # be costly, arrays and all, and JAX reads no more of it.)
        self._text = str(fun) if isinstance(fun, types.BuiltinFunctionType) else ""

    def __str__(self):
        return self._text


def ready_for(entry: Entry, jitted: Callable) -> Callable:
    """What the hot path is to call for ``entry``, whose ``jax.jit`` is
    ``jitted``: that, or, for an entry whose traces warned, that replaying
    their warnings to each new caller (see :mod:`.trace_warnings`); while
    ``config.verify`` is above 0, that sampled for verify mode."""
    warned = entry.warned
    ready = jitted
    if warned.callers is not None:

        def replaying(*args, **kwargs):
            callers = [current_callable(entry), *compared_by_identity(args, kwargs)]
            with trace_warnings.replaying(warned, callers):
                return jitted(*args, **kwargs)

        replaying.replays = jitted
        ready = replaying
    return _sampled(entry, ready) if config.verify else ready


def _sampled(entry: Entry, ready: Callable) -> Callable:
    """``ready``, each call checked by verify mode with probability ``config.verify``."""

    def sampled(*args, **kwargs):
        if verify.SAMPLE() >= config.verify:
            return ready(*args, **kwargs)
        return verify.check(entry, ready, current_callable(entry), args, kwargs)

    sampled.unsampled = ready
    return sampled


def unsampled(ready: Callable | None) -> Callable | None:
    """What an entry serves, without verify mode's sampling."""
    return getattr(ready, "unsampled", ready)


def _resample(p: float) -> None:
    """Serves every entry that serves its ``ready_for`` with verify mode's
    sampling, or without, as ``config.verify`` says now (others, loaded
    from disk or switched to arguments by structure, are not verified)."""
    for entry in live_entries():
        ready, jitted = unsampled(entry.ready), entry.jitted
        if ready is not None and (ready is jitted or getattr(ready, "replays", None) is jitted):
            serve(entry, _sampled(entry, ready) if p else ready)


config.on_verify(_resample)


def _warned(entry: Entry, callers: list, shown: list) -> None:
    """After a trace of ``entry`` by ``callers`` (see :func:`ready_for`) that
    showed ``shown`` (or of an entry that had warned before): they have seen
    its warnings, and later callers will."""
    if trace_warnings.saw(entry.warned, callers, shown) and entry.ready is not None:
        # (a retrace for new shapes, on the hot path; sampled once, if verify mode is on)
        serve(entry, ready_for(entry, unsampled(entry.ready)))


def _same(x):
    return x


def _refile_after_trace(entry: Entry, fn, lift: Lift, wrote: str) -> None:
    """Files ``entry`` under ``fn``'s key now that tracing made sinks (``fn``:
    what the call is keyed on, see :mod:`.statics`); where the trace wrote a
    channel, no longer under the key computed before the trace.

    That key walked the state the trace wrote by its contents then (see
    :mod:`stablejit._fingerprint.sinks`), and another function whose side
    channels are other objects holding the same contents matches it. Its
    calls would skip the trace's writes: a list, dict, cell or global (``log
    = []`` made afresh around a redefined function, ``nonlocal n``) is what
    code outside reads back, and ``jax.jit``, tracing each new function
    object, writes into each new one. An object's own attributes (a flax
    module's lazy set-up, a cache in its ``__dict__``) are its bookkeeping:
    a new object in the state the first one was in traces to the same
    program, so the entry stays reachable by that state.
    """
    first = entry.keys[0]
    after = first[:-1] + (fingerprint(fn, lift)[0],)
    if wrote is CHANNEL:
        refile(entry, first, after)
        if entry.counts.stats is not None:
            explain.wrote_side_channels(entry.counts.stats, fn)
    else:
        alias(entry, after)
