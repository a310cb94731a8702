"""The census as data: one JSON-able dict, read from the tallies under their lock.

The terminal text, the ``--report`` JSON file and the compat harness all
read this dict, so what the census knows is decided here once, and the
rendering only lays it out.
"""

from __future__ import annotations

import collections
import re
from typing import Any

import jax

from .._diagnostics import events
from .._diagnostics import stats as _stats
from .._native import NATIVE
from .._observe import cache_info
from .._runtime import cache as _cache
from .._runtime import verify as _verify
from .counts import CENSUS

TOP = 10

# What JAX names an eager loop's trace (a jit of the loop's primitive).
_LOOP_PRIMITIVES = ("while", "scan", "cond")


def report() -> dict[str, Any]:
    """The census so far, as a JSON-able dict.

    Returns:
        ``mode``, ``jax_version``, ``jit_objects`` (calls of ``jax.jit``);
        ``traces`` and ``compiles`` (None where JAX no longer reports the
        event) with their seconds; ``stablejit`` (hits, misses, traces,
        compiles, entries, verify mode's counts, whether the C accelerator
        ran; None in mode ``"off"``); ``redefined`` (the codes
        that reached ``jax.jit`` through more than one function object, most
        first, at most 10) and ``redefined_codes`` (how many there were);
        ``retrace_reasons`` (why stablejit retraced, identical reasons
        together, most first, at most 10) and ``retraces``; ``loop_calls``
        (top-level calls of ``jax.lax``'s loops), ``loop_traces`` (eager
        loops' traces, by JAX's name for them), ``redefined_loops`` and
        ``redefined_loop_codes`` (the codes passed to those calls through
        more than one function object); ``fallbacks`` (each with its reason
        and the traces of functions of its name); ``functions``
        (stablejit's counters per function, most traces first, at most 10;
        empty in mode ``"off"``); ``hint`` (what another mode would do, or
        None).

    Example:
        >>> from stablejit import _census
        >>> sorted(_census.report())[:3]
        ['compile_seconds', 'compiles', 'fallbacks']
    """
    c = CENSUS
    with c.lock:
        codes = list(c.codes.values())
        counts, seconds = dict(c.counts), dict(c.seconds)
        by_name = {k: collections.Counter(v) for k, v in c.by_name.items()}
        retraces = sorted(c.retraces.items(), key=lambda kv: -kv[1][0])
        jit_objects = c.jit_objects
        retrace_count = c.retrace_count
        loop_codes = list(c.loop_codes.items())
        loop_of = dict(c.loop_of)
        loop_calls = c.loop_calls
        fallbacks = sorted(c.fallbacks)

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
    loops = sorted(
        ((k, code) for k, code in loop_codes if code.functions > 1),
        key=lambda kc: (-kc[1].functions, -kc[1].jits),
    )
    out["loop_calls"] = loop_calls
    out["loop_traces"] = {p: by_name["traces"][p] for p in _LOOP_PRIMITIVES}
    out["redefined_loop_codes"] = len(loops)
    out["redefined_loops"] = [
        {
            "code": code.qualname,
            "where": code.where,
            "loop": loop_of[k],
            "function_objects": code.functions,
            "loop_calls": code.jits,
        }
        for k, code in loops[:TOP]
    ]
    out["fallbacks"] = [
        {
            "function": fn,
            "reason": reason,
            # JAX names a trace by __name__: same-named functions share a count.
            "traces": by_name["traces"][_short_name(fn)] if _short_name(fn) else None,
        }
        for fn, reason in fallbacks
    ]
    out["functions"] = []
    if c.mode in ("jit", "patch"):
        info = cache_info()
        out["stablejit"] = {
            "hits": info.hits,
            "misses": info.misses,
            "traces": info.traces,
            "compiles": info.compiles,
            "entries": info.entries,
            # This process's, past every clear_cache() (a suite may clear between its tests).
            "verified": _verify.TOTALS[0],
            "mismatches": _verify.TOTALS[1],
            # Whether the C accelerator ran (else the pure-Python path: see _native.py).
            "accelerator": NATIVE is not None,
        }
        out["functions"] = _functions(retraces)
    out["hint"] = _hint(c.mode, out)
    return out


def _short_name(function: str) -> str | None:
    """``step`` of ``stable_jit(train.<locals>.step) at prog.py:5``: what JAX names its
    traces; None for a loop's or partial's name (``while_loop(cond, body)``)."""
    m = re.match(r"^stable_jit\((?P<name>[\w.<>]+)\)", function)
    return m["name"].rsplit(".", 1)[-1] if m else None


def _functions(retraces: list) -> list[dict[str, Any]]:
    """stablejit's counters per function (all its redefinitions together), most traces
    first: a first call is a miss no retrace explains, the others are in the reasons."""
    live = _cache.live_entries()
    explained: collections.Counter = collections.Counter()
    for (fn, _what), (n, _last) in retraces:
        explained[fn] += n
    rows = []
    for tag, s in list(_stats.STATS.items()):
        info = _stats.cache_info(live, tag)
        function = f"stable_jit({s.name}){s.location}"
        rows.append(
            {
                "function": function,
                "hits": info.hits,
                "misses": s.misses,
                "traces": info.traces,
                "compiles": info.compiles,
                "explained": explained[function],
            }
        )
    rows.sort(key=lambda r: (-r["traces"], -r["misses"], r["function"]))
    return rows[:TOP]


def _hint(mode: str | None, report: dict[str, Any]) -> str | None:
    """What would help that this mode does not do."""
    n = report["redefined_loop_codes"]
    if n and mode in ("off", "jit"):
        codes = "code reaches" if n == 1 else "codes reach"
        return (
            f"{n} {codes} jax.lax's loops through several function objects: each new one "
            "traces and compiles its loop again; --mode patch routes jax.lax's loops through "
            "stablejit"
        )
    return None
