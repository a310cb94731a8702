"""What an entry holds in JAX's own caches, and giving it up.

A ``jax.jit`` that has run holds, for each argument signature, its executable
in JAX's C++ dispatch cache (8,192 places shared by every ``jax.jit``, least
recently used out), and its function, weakly keyed, in JAX's Python caches of
traced jaxprs, inferred parameters and lowerings (a lowering holds its
executable too). The jits JAX makes for eager operations (``jnp.subtract``
on arrays) share them.

When a function dies under plain ``jax.jit``, all of that goes with it. An
entry on probation (see :mod:`.cache`) keeps its function alive for its
executables, and so kept all of it: numpyro's suite compiled again eager
operations that its held places had pushed out of the dispatch cache, which
plain ``jax.jit`` still held. So an entry going on probation gives up its
places in the dispatch cache (:func:`suspend`): a later call with those shapes
goes once through JAX's Python path, which finds the jaxpr and the compiled
lowering in JAX's own caches (neither traced nor compiled again) and puts the
executable back. On a shard of numpyro's suite that took its 21 compiles more
than plain ``jax.jit`` to 20 fewer; giving up its places in the Python caches
instead saved 3, and would cost a trace to a call under another trace
(``compat/results/numpyro-compiles-py312-jax012.md``).

An entry dropped gives up everything it holds (:func:`forget`), and only
that: ``jax.jit``'s ``clear_cache()`` also empties JAX's cache of inferred
parameters for every function.

And an entry's canonical function keeps, in JAX's trace cache, only keys
like the ones ``jax.jit`` of the calling function would hold (:class:`HeldKeys`):
JAX explains a miss (``jax_explain_cache_misses``) against the traced
function's other keys, and a canonical function is shared by every function
of its key. So its keys are of one trace context at a time: without that, one
function's miss would be explained by a trace another function made under
other config values (an earlier test's, a library's under its own
precision), where ``jax.jit`` of that function compares like with like. And
they go once every function that made them has died, as ``jax.jit``'s go with
its function: a new function's first miss is then explained as JAX explains
a new function's ("never seen function"), not by an older one's keys.
"""

from __future__ import annotations

import functools
import logging
import weakref

from jax._src import util as _jax_util
from jax._src.config import trace_context
from jax._src.interpreters import partial_eval as pe

_log = logging.getLogger("stablejit")

FORGETS_TRACES = getattr(getattr(pe, "trace_to_jaxpr", None), "evict_weakref", None)
"""How to make JAX's trace cache forget one function's keys, or None: a JAX
(before 0.7) without that cache, whose explanations then stay as they were."""


def _nothing() -> None:
    pass


def suspend(jitted) -> None:
    """Drops the executables of ``jitted`` (a ``jax.jit``) from JAX's C++
    dispatch cache only (nothing, for a JAX without a per-function clear)."""
    getattr(jitted, "_clear_cache", _nothing)()


def forget(jitted) -> None:
    """Drops the executables of ``jitted`` and its places in JAX's Python
    caches, and nothing else."""
    clear = getattr(jitted, "_clear_cache", None)
    (jitted.clear_cache if clear is None else clear)()
    fn = getattr(jitted, "__wrapped__", None)
    if fn is None:
        return
    for cache in list(getattr(_jax_util, "_caches", ())):
        # weakref_lru_cache keys its first argument weakly; linear_util's
        # cache keys the function a WrappedFun wraps.
        evict = getattr(cache, "evict_weakref", None) or getattr(cache, "evict_function", None)
        if evict is None:
            continue
        try:
            evict(fn)
        except TypeError as e:  # a JAX whose evictors take other arguments: left to their bounds
            _log.debug("stablejit: could not evict %r from a JAX cache: %r", fn, e)


class HeldKeys:
    """Whose keys JAX's trace cache holds for one canonical function: the
    trace context they are of (None: none held, or forgotten), and the
    functions that made them, weakly."""

    __slots__ = ("context", "makers", "anonymous", "__weakref__")

    def __init__(self):
        self.context = None
        self.makers: dict[int, weakref.ref] = {}
        # A maker that cannot be referenced weakly: its keys are held for good.
        self.anonymous = False

    def tracing(self, canonical, fn) -> None:
        """At the start of a trace of ``canonical`` for a call of ``fn`` (JAX
        has explained its miss): in another context than the keys held,
        forgets them all, else notes ``fn`` as one of their makers.

        The trace's own key goes too (JAX filed it as the trace began, and
        keeps no key apart): the next trace, in either context, holds the
        keys from then on. Only JAX's trace cache forgets: its inferred
        parameters, lowerings and executables stay, so nothing traced is
        traced or compiled again; a later explanation may find fewer keys.
        """
        now = trace_context()
        if self.context is not None and now != self.context:
            self.forget(canonical)
            return
        self.context = now
        key = id(fn)
        if key in self.makers:
            return
        try:
            # (The callback only unlists: a function may die inside JAX's
            # own cache code, where forgetting is not safe; see orphaned.)
            self.makers[key] = weakref.ref(fn, functools.partial(_unlist, weakref.ref(self), key))
        except TypeError:
            self.anonymous = True

    def orphaned(self) -> bool:
        """Whether keys are held and every function that made them has died."""
        return self.context is not None and not self.makers and not self.anonymous

    def forget(self, canonical) -> None:
        """Makes JAX's trace cache forget ``canonical``'s keys."""
        if FORGETS_TRACES is not None:
            FORGETS_TRACES(canonical)
        self.context = None
        self.makers.clear()
        self.anonymous = False


def _unlist(held_ref, key, _) -> None:
    held = held_ref()
    if held is not None:
        held.makers.pop(key, None)
