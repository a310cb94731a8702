"""The census: what one run did with ``jax.jit``, and what stablejit did about it.

Shared by the pytest plugin (``stablejit.pytest``) and the program runner
(``python -m stablejit run``). It answers "does stablejit help my code, and
is anything left?" by counting, for the whole process:

* the ``jax.jit`` objects created, and per code object the distinct function
  objects that reached ``jax.jit`` (a redefined closure: one code, many
  functions, a trace each under plain ``jax.jit``);
* traces and compiles, from ``jax.monitoring``'s duration events;
* under stablejit, its hits and misses, and why each retrace happened (its
  ``stablejit`` logger records, captured here rather than printed).
Nothing here is imported by the rest of stablejit.
"""

from __future__ import annotations

import collections
import functools
import logging
import re
import threading
import types
import weakref
from typing import Any

import jax
from jax import monitoring

from ._config import config
from ._diagnostics import events
from ._observe import cache_info
from ._patch import patch
from ._runtime.api import stable_jit

MODES = ("off", "jit", "patch")
TOP = 10

# The jax.monitoring events counted, by kind.
_EVENTS = {"traces": events.TRACE, "compiles": events.COMPILE}

_RETRACE = re.compile(r"^(?P<function>.*?) retraced: (?P<reasons>.*)$", re.S)
# "closure variable 'k' changed 1.0 → 2.0", "global 'S' was rebound: 2 → 3",
# "argument 0: f32[3] → f32[4]": the part before the values names what changed.
_CHANGE = re.compile(
    r"^(?P<what>.+?)(?P<sep> changed | was rebound: |: )(?P<values>.+ → .+)$", re.S
)


class _Code:
    """What reached ``jax.jit`` with one code object."""

    __slots__ = ("name", "qualname", "where", "jits", "functions", "_alive", "_ids")

    def __init__(self, name: str, qualname: str, where: str):
        self.name, self.qualname, self.where = name, qualname, where
        self.jits = 0
        self.functions = 0
        # Distinct objects, even when a dead closure's id is reused by the next.
        self._alive: weakref.WeakSet = weakref.WeakSet()
        self._ids: set[int] = set()  # for callables that take no weak reference

    def note(self, fun: Any) -> None:
        self.jits += 1
        try:
            if fun in self._alive:
                return
            self._alive.add(fun)
        except TypeError:
            if id(fun) in self._ids:
                return
            self._ids.add(id(fun))
        self.functions += 1


def _code_of(fun: Any) -> tuple[Any, str, str, str]:
    """``(key, __name__, qualname, file:line)`` of what ``fun`` runs."""
    while isinstance(fun, functools.partial):
        fun = fun.func
    fun = getattr(fun, "__func__", fun)
    code = getattr(fun, "__code__", None)
    if not isinstance(code, types.CodeType):
        code = getattr(type(fun).__call__, "__code__", None) if callable(fun) else None
    if isinstance(code, types.CodeType):
        where = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"
        qualname = getattr(code, "co_qualname", None) or getattr(fun, "__qualname__", code.co_name)
        return code, code.co_name, qualname, where
    name = getattr(fun, "__name__", type(fun).__name__)
    return type(fun), name, getattr(fun, "__qualname__", name), "?"


class _Census:
    def __init__(self) -> None:
        self.mode: str | None = None
        self.lock = threading.Lock()
        self.jit_objects = 0
        self.codes: dict[Any, _Code] = {}
        self.events = _EVENTS
        self.counts = dict.fromkeys(self.events, 0)
        self.seconds = dict.fromkeys(self.events, 0.0)
        self.by_name: dict[str, collections.Counter] = {
            k: collections.Counter() for k in self.events
        }
        self.retraces: dict[tuple[str, str], list] = {}  # (function, what) → [count, last change]
        self.retrace_count = 0
        self.show_retraces = False

    def note(self, fun: Any) -> None:
        key, name, qualname, where = _code_of(fun)
        with self.lock:
            self.jit_objects += 1
            code = self.codes.get(key)
            if code is None:
                code = self.codes[key] = _Code(name, qualname, where)
            code.note(fun)

    def on_event(self, event: str, seconds: float, **kwargs: Any) -> None:
        for kind, name in self.events.items():
            if event == name:
                fun_name = str(kwargs.get("fun_name", ""))
                # Compiles are named "jit(inner)", traces "inner".
                if fun_name.startswith("jit(") and fun_name.endswith(")"):
                    fun_name = fun_name[4:-1]
                with self.lock:
                    self.counts[kind] += 1
                    self.seconds[kind] += seconds
                    self.by_name[kind][fun_name] += 1

    def on_retrace(self, function: str, reasons: str) -> None:
        with self.lock:
            self.retrace_count += 1
            for reason in reasons.split("; "):
                m = _CHANGE.match(reason)
                if m is None:
                    what, change = reason, ""
                else:
                    verb = " was rebound" if "rebound" in m["sep"] else " changed"
                    what, change = m["what"] + verb, m["values"]
                slot = self.retraces.setdefault((function, what), [0, ""])
                slot[0] += 1
                slot[1] = change


_CENSUS = _Census()


class _RetraceFilter(logging.Filter):
    """Takes stablejit's retrace explanations off the ``stablejit`` logger.

    A filter rather than a handler: the records are counted, then dropped
    before any handler (or the root logger) prints them, unless the user had
    asked for them; stablejit's other messages pass untouched.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        m = _RETRACE.match(record.getMessage())
        if m is None:
            return True
        _CENSUS.on_retrace(m["function"], m["reasons"])
        return _CENSUS.show_retraces


def _counting(target: Any) -> Any:
    """``target`` (a ``jax.jit``), counting what it is called on."""

    @functools.wraps(target)
    def jit(*args: Any, **kwargs: Any) -> Any:
        if not args:
            # The decorator factory (``@jax.jit(static_argnums=...)``): let
            # ``target`` check the options, count when it is applied.
            target(**kwargs)
            return functools.partial(jit, **kwargs)
        _CENSUS.note(args[0])
        return target(*args, **kwargs)

    return jit


def install(mode: str) -> None:
    """Starts the census for this process, in one of three modes.

    Call it before the code under test is imported: code that bound
    ``jax.jit`` earlier (``from jax import jit``) is neither counted nor
    routed through stablejit.

    Arguments:
        mode: ``"off"`` — plain ``jax.jit``, only counted; ``"jit"`` —
            ``jax.jit`` becomes :func:`stablejit.stable_jit`; ``"patch"`` —
            :func:`stablejit.patch` (``jax.jit`` and ``jax.lax``'s loops).
            In every mode ``jax.jit`` is a thin counting wrapper whose
            ``__wrapped__`` is the function it stands for, and under ``"jit"``
            and ``"patch"`` ``stablejit.config.explain_misses`` is turned on
            (its log records are collected, not printed, unless it was on
            already).

    Returns:
        None. Raises ``ValueError`` for an unknown mode, ``RuntimeError`` if
        the census was installed already.

    Example:
        >>> from stablejit import _census
        >>> _census.MODES
        ('off', 'jit', 'patch')
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if _CENSUS.mode is not None:
        raise RuntimeError(f"the stablejit census is already installed (mode {_CENSUS.mode!r})")
    _CENSUS.mode = mode
    monitoring.register_event_duration_secs_listener(_CENSUS.on_event)
    if mode == "jit":
        target = stable_jit
    else:
        if mode == "patch":
            patch()
        target = jax.jit
    jax.jit = _counting(target)
    if mode != "off":
        _CENSUS.show_retraces = config.explain_misses
        config.explain_misses = True
        logging.getLogger("stablejit").addFilter(_RetraceFilter())


def installed() -> str | None:
    """The mode :func:`install` was called with, or None."""
    return _CENSUS.mode


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
    c = _CENSUS
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


def _table(rows: list[tuple[str, ...]], left: int = 1) -> list[str]:
    """Rows as aligned columns: the first ``left`` to the left, numbers to the right."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  "
        + "  ".join(
            cell.ljust(w) if i < left else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    ]


def _n(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def render(report: dict[str, Any]) -> str:
    """The census as a compact block of text, for a terminal.

    Arguments:
        report: a dict returned by :func:`report` (or read back from its JSON).

    Returns:
        A few lines: the totals, the top redefined codes, the top retrace
        reasons; no trailing newline.

    Example:
        >>> from stablejit import _census
        >>> print(_census.render({"mode": "off", "jit_objects": 3, "traces": 4,
        ...     "traces_of_jitted": 3, "compiles": 4, "redefined": [], "retrace_reasons": []}))
        stablejit census (mode off)
          jax.jit objects created  3
          traces                   4  (3 of jitted functions)
          compiles                 4
    """
    lines = [f"stablejit census (mode {report['mode']})"]
    traces = _n(report["traces"])
    if report["traces"] is not None and report.get("traces_of_jitted") is not None:
        traces = (traces, f"({report['traces_of_jitted']:,} of jitted functions)")
    else:
        traces = (traces, "")
    rows = [
        ("jax.jit objects created", _n(report["jit_objects"]), ""),
        ("traces", *traces),
        ("compiles", _n(report["compiles"]), ""),
    ]
    sj = report.get("stablejit")
    if sj:
        rows.append(("stablejit hits / misses", f"{sj['hits']:,} / {sj['misses']:,}", ""))
        rows.append(("stablejit traces / compiles", f"{sj['traces']:,} / {sj['compiles']:,}", ""))
    lines += _table(rows)
    if report["redefined"]:
        more = report.get("redefined_codes", 0) - len(report["redefined"])
        lines.append(
            "code jitted through several function objects"
            + (
                f" (top {len(report['redefined'])} of {report['redefined_codes']})"
                if more > 0
                else ""
            )
            + ":"
        )
        head = ("code", "where", "functions", "jax.jit calls", "traces")
        lines += _table(
            [head]
            + [
                (
                    r["code"],
                    r["where"],
                    _n(r["function_objects"]),
                    _n(r["jit_objects"]),
                    _n(r["traces"]),
                )
                for r in report["redefined"]
            ],
            left=2,
        )
    if report["retrace_reasons"]:
        n = report.get("retraces", 0)
        lines.append(f"why stablejit retraced ({n:,} retrace{'' if n == 1 else 's'}):")
        for r in report["retrace_reasons"]:
            last = f" (last: {r['last']})" if r["last"] else ""
            lines.append(f"  {r['count']:>4}×  {r['function']}: {r['reason']}{last}")
    return "\n".join(lines)
