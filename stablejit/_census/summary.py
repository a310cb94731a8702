"""The census as data: one JSON-able dict, read from the tallies under their lock.

The terminal text, the ``--report`` JSON file and the compat harness all
read this dict, so what the census knows is decided here once, and the
rendering only lays it out.
"""

from __future__ import annotations

import collections
from typing import Any

import jax

from .._diagnostics import events
from .._observe import cache_info
from .counts import CENSUS

TOP = 10


def report() -> dict[str, Any]:
    """The census so far, as a JSON-able dict.

    Returns:
        ``mode``, ``jax_version``, ``jit_objects`` (calls of ``jax.jit``);
        ``traces`` and ``compiles`` (None where JAX no longer reports the
        event) with their seconds; ``stablejit`` (hits, misses, traces,
        compiles, entries; None in mode ``"off"``); ``redefined`` (the codes
        that reached ``jax.jit`` through more than one function object, most
        first, at most 10) and ``redefined_codes`` (how many there were);
        ``retrace_reasons`` (why stablejit retraced, identical reasons
        together, most first, at most 10) and ``retraces``.

    Example:
        >>> from stablejit import _census
        >>> sorted(_census.report())[:3]
        ['compile_seconds', 'compiles', 'jax_version']
    """
    c = CENSUS
    with c.lock:
        codes = list(c.codes.values())
        counts, seconds = dict(c.counts), dict(c.seconds)
        by_name = {k: collections.Counter(v) for k, v in c.by_name.items()}
        retraces = sorted(c.retraces.items(), key=lambda kv: -kv[1][0])
        jit_objects = c.jit_objects
        retrace_count = c.retrace_count

    def count(kind: str) -> int | None:
        # A zero from an event JAX does not define any more means "unknown"
        # (shown as "n/a"), not a silent zero.
        return counts[kind] if c.events[kind] in events.FROM_JAX or counts[kind] else None

    redefined = sorted((k for k in codes if k.functions > 1), key=lambda k: (-k.functions, -k.jits))
    names = {k.name for k in codes}
    out: dict[str, Any] = {
        "mode": c.mode,
        "jax_version": jax.__version__,
        "jit_objects": jit_objects,
        "traces": count("traces"),
        "traces_of_jitted": sum(by_name["traces"][n] for n in names),
        "compiles": count("compiles"),
        "trace_seconds": round(seconds["traces"], 6),
        "compile_seconds": round(seconds["compiles"], 6),
        "stablejit": None,
        "redefined_codes": len(redefined),
        "redefined": [
            {
                "code": k.qualname,
                "where": k.where,
                "function_objects": k.functions,
                "jit_objects": k.jits,
                # JAX names a trace by __name__: same-named functions share a count.
                "traces": by_name["traces"][k.name],
            }
            for k in redefined[:TOP]
        ],
        "retraces": retrace_count,
        "retrace_reasons": [
            {"function": fn, "reason": what, "count": n, "last": last}
            for (fn, what), (n, last) in retraces[:TOP]
        ],
    }
    if c.mode in ("jit", "patch"):
        info = cache_info()
        out["stablejit"] = {
            "hits": info.hits,
            "misses": info.misses,
            "traces": info.traces,
            "compiles": info.compiles,
            "entries": info.entries,
        }
    return out
