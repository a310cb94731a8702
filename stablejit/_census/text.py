"""The census as text: a compact block for a terminal, laid out from the report's dict.

Kept apart from :func:`report` so that what is counted and how it reads can
change separately, and so a JSON report read back (``--report``) renders
the same as a live one.
"""

from __future__ import annotations

from typing import Any


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
        A few lines: the totals, the top redefined codes (passed to
        ``jax.jit``, then to eager loops), stablejit per function, the top
        retrace reasons, the fallbacks, a hint; no trailing newline.

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
    lines += _loops(report)
    lines += _functions(report)
    if report["retrace_reasons"]:
        n = report.get("retraces", 0)
        lines.append(f"why stablejit retraced ({n:,} retrace{'' if n == 1 else 's'}):")
        for r in report["retrace_reasons"]:
            last = f" (last: {r['last']})" if r["last"] else ""
            lines.append(f"  {r['count']:>4}×  {r['function']}: {r['reason']}{last}")
    if report.get("fallbacks"):
        lines.append("stablejit fell back (each fallback traces as plain jax.jit does):")
        for r in report["fallbacks"]:
            traces = "" if r["traces"] is None else f"  ({r['traces']:,} traces)"
            lines.append(f"  {r['function']}: {r['reason']}{traces}")
    if report.get("hint"):
        lines.append(f"hint: {report['hint']}")
    return "\n".join(lines)


def _loops(report: dict[str, Any]) -> list[str]:
    """The codes passed to eager loops through several function objects, and those loops'
    traces (a JSON report from before these keys renders without them)."""
    rows = report.get("redefined_loops")
    if not rows:
        return []
    total = report.get("redefined_loop_codes", 0)
    top = f" (top {len(rows)} of {total})" if total > len(rows) else ""
    lines = [f"code passed to jax.lax's loops through several function objects{top}:"]
    head = ("code", "where", "loop", "functions", "loop calls")
    lines += _table(
        [head]
        + [
            (r["code"], r["where"], r["loop"], _n(r["function_objects"]), _n(r["loop_calls"]))
            for r in rows
        ],
        left=3,
    )
    traced = {p: n for p, n in report.get("loop_traces", {}).items() if n}
    if traced:
        lines.append("  eager loops traced: " + ", ".join(f"{p} {n:,}" for p, n in traced.items()))
    return lines


def _functions(report: dict[str, Any]) -> list[str]:
    """stablejit's counters per function that missed or traced."""
    rows = [r for r in report.get("functions", []) if r["misses"] or r["traces"]]
    if not rows:
        return []
    lines = [
        "stablejit per function (misses: its first call, then each new variant; "
        "explained: retraces given below):"
    ]
    head = ("function", "hits", "misses", "traces", "compiles", "explained")
    keys = ("hits", "misses", "traces", "compiles", "explained")
    return lines + _table([head] + [(r["function"], *(_n(r[k]) for k in keys)) for r in rows])
