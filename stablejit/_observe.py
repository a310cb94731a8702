"""The public observability calls: counters, trace counts, descriptions."""

from __future__ import annotations

from typing import Any

from ._diagnostics import describe as _describe
from ._diagnostics import stats as _stats
from ._registry import clear_all
from ._runtime import cache as _cache
from ._runtime.jitted import StableJitted


def _wrapped(fn, what: str) -> StableJitted:
    if not isinstance(fn, StableJitted):
        raise TypeError(
            f"{what} expects a function returned by stable_jit, got {type(fn).__name__}: {fn!r}"
        )
    return fn


def cache_info(fn: StableJitted | None = None) -> _stats.CacheInfo:
    """Cache counters of one ``stable_jit`` function, or of all of them.

    Arguments:
        fn: a function returned by :func:`stable_jit` (its counters cover
            every redefinition of it), or None for the totals.

    Returns:
        A :class:`CacheInfo`: hits, misses, traces, compiles, entries,
        evictions, trace_seconds, compile_seconds, and verify mode's
        verified and mismatches.

    Example:
        >>> import jax.numpy as jnp, stablejit
        >>> f = stablejit.stable_jit(lambda x: x - 1)
        >>> _ = f(jnp.ones(2)); _ = f(jnp.ones(2))
        >>> stablejit.cache_info(f).hits
        1
    """
    if fn is None:
        return _stats.cache_info(_cache.live_entries())
    return _wrapped(fn, "cache_info").cache_info()


def num_traces(fn: StableJitted) -> int:
    """How many times ``fn`` (any redefinition of it) was traced: for tests.

    Arguments:
        fn: a function returned by :func:`stable_jit`.

    Returns:
        The number of traces since it was first called or its cache cleared.

    Example:
        >>> import jax.numpy as jnp, stablejit
        >>> f = stablejit.stable_jit(lambda x: x * 2)
        >>> _ = f(jnp.ones(2)); _ = f(jnp.ones(3))
        >>> stablejit.num_traces(f)
        2
    """
    return _wrapped(fn, "num_traces").cache_info().traces


def clear_cache() -> None:
    """Drops every compiled entry of every ``stable_jit`` function, and all counters.

    Example:
        >>> import stablejit
        >>> stablejit.clear_cache()
    """
    clear_all()


def describe(fn: Any) -> _describe.Description:
    """What the cache key of ``fn`` is made of, in your names.

    Lists each closure variable, global, default argument, attribute and
    nested function that goes into the key (with its value), and each array
    that is lifted to an input (with its shape and dtype). The tool to reach
    for when a function recompiles, or does not, unexpectedly.

    Arguments:
        fn: any callable, or a function returned by :func:`stable_jit`.

    Returns:
        A :class:`Description`; ``print`` it, or read ``.lifted`` and ``.static``.

    Example:
        >>> import jax.numpy as jnp, stablejit
        >>> w = jnp.ones((3, 4)); k = 2
        >>> def f(x):
        ...     return x @ w * k
        >>> stablejit.describe(f).lifted
        [("global 'w'", 'float32[3,4]')]
    """
    return _describe.describe(fn._fun if isinstance(fn, StableJitted) else fn)
