"""Summaries: one suite in one environment, every mode side by side.

``<results>/<suite>-<env>.md`` and ``.json`` for the full profile,
``<results>/quick/...`` for the quick one, plus ``summary-<env>.md``
with every suite's row per mode, where ``<results>`` is ``suites.results_root()``
(the ignored ``local-results/compat/``, or the committed ``compat/results/`` with ``--save``). The interesting part is the list of tests
that pass stock but not in a mode, each with its first error line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from compat.by_design import by_design, compiles_more_by_design
from compat.suites import ALL_MODES, SUITES, base_mode, results_root

MD_LIMIT = 200  # regressions listed per mode in the markdown (all are in the JSON)


def out_dir(profile: str) -> Path:
    root = results_root()
    return root if profile == "full" else root / profile


def load(profile: str, env: str, suite: str) -> dict[str, dict]:
    """Each mode's raw result: its one run, or its shards merged once a
    complete set of them is there (the most recent complete set)."""
    raw = results_root() / "raw" / profile / env / suite
    runs = {}
    for mode in ALL_MODES:
        path = raw / f"{mode}.json"
        if path.exists():
            runs[mode] = json.loads(path.read_text())
            continue
        sets: dict[int, dict[int, dict]] = {}
        in_parts: dict[tuple[int, int, int], dict[int, dict]] = {}
        for path in raw.glob(f"{mode}.shard-*.json"):
            # (the census report beside each shard matches the glob too)
            if not _SHARD_FILE.fullmatch(path.name.removeprefix(mode)):
                continue
            run = json.loads(path.read_text())
            i, n = run["shard"]
            if run.get("part"):  # a part of a shard (--part)
                j, m = run["part"]
                in_parts.setdefault((i, n, m), {})[j] = run
            else:
                sets.setdefault(n, {})[i] = run
        for (i, n, m), parts in in_parts.items():
            if _complete(parts, m):  # the shard, unless a whole run of it is there
                sets.setdefault(n, {}).setdefault(i, {**merge(parts), "shard": [i, n], "parts": m})
        complete = [parts for n, parts in sets.items() if _complete(parts, n)]
        newest = lambda p: max(r["finished"] for r in p.values())  # noqa: E731
        if complete:
            runs[mode] = merge(max(complete, key=newest))
        elif sets:
            # Only some shards ran (a suite longer than the time there was):
            # summarised as what it is, named as a part in the summary.
            n, parts = max(sets.items(), key=lambda item: newest(item[1]))
            runs[mode] = {**merge(parts), "partial": f"shard(s) {sorted(parts)} of {n}"}
    return runs


_SHARD_FILE = re.compile(r"\.shard-\d+of\d+(\.part-\d+of\d+)?\.json")
"""A shard's raw result after its mode's name (a part's too), not its census."""


def _complete(runs: dict[int, dict], n: int) -> bool:
    """Whether ``runs`` (by number) are all N shards, or all M parts."""
    return sorted(runs) == list(range(1, n + 1))


def merge(parts: dict[int, dict]) -> dict:
    """One raw result from a mode's shards: outcomes together, counts and
    times summed, the stablejit revisions each shard ran against listed."""
    runs = [parts[i] for i in sorted(parts)]
    outcomes = {t: o for run in runs for t, o in run["outcomes"].items()}
    compiles = {t: n for run in runs for t, n in (run.get("compiles_by_test") or {}).items()}
    census = {}
    for run in runs:
        for k, v in (run.get("census") or {}).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):  # (flags are not summed)
                census[k] = census.get(k, 0) + v
    counts: dict[str, int] = {}
    for outcome, _ in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    return {
        **runs[0],
        "shard": None,
        "shards": len(runs),
        "outcomes": outcomes,
        "compiles_by_test": compiles,
        "counts": dict(sorted(counts.items())),
        "census": census or None,
        "wall_s": round(sum(r["wall_s"] for r in runs), 1),
        "returncode": max(r["returncode"] for r in runs),
        "timed_out": any(r["timed_out"] for r in runs),
        "finished": max(r["finished"] for r in runs),
        # (a shard run in parts lists its parts' revisions already)
        "stablejit": sorted(
            {v for r in runs for v in _as_list(r.get("stablejit")) if v},
        ),
        "without_accelerator": [w for r in runs for w in without_accelerator(r)],
    }


def without_accelerator(run: dict) -> list[str]:
    """The shards (or parts) of ``run`` whose stablejit ran its pure-Python path, the C
    accelerator not loaded (not built, or built from other sources than it ran with)."""
    if "without_accelerator" in run:  # merged already
        return run["without_accelerator"]
    if (run.get("census") or {}).get("stablejit_accelerator") is not False:
        return []
    where = [f"{what} {'{}/{}'.format(*run[what])}" for what in ("shard", "part") if run.get(what)]
    return [" ".join(where) or "the run"]


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _row(run: dict) -> dict:
    c = run["counts"]
    census = run.get("census") or {}
    verify = run["mode"] != base_mode(run["mode"])
    return {
        "passed": c.get("passed", 0),
        "failed": c.get("failed", 0),
        "errors": c.get("error", 0) + c.get("crashed", 0),
        "skipped": c.get("skipped", 0) + c.get("xfailed", 0),
        "xpassed": c.get("xpassed", 0),
        "wall_s": run["wall_s"],
        "compiles": census.get("compiles"),
        "traces": census.get("traces"),
        "stablejit_hits": census.get("stablejit_hits"),
        "stablejit_misses": census.get("stablejit_misses"),
        # (counted in every stablejit mode: zero but where verify mode ran)
        "stablejit_verified": census.get("stablejit_verified") if verify else None,
        "stablejit_mismatches": census.get("stablejit_mismatches") if verify else None,
        "status": "timed out" if run["timed_out"] else f"exit {run['returncode']}",
    }


def regressions(stock: dict, other: dict) -> list[dict]:
    """Tests that pass stock but not in ``other`` (failed, errored, skipped,
    or never reached when the run was cut short)."""
    out = []
    for test, (outcome, _) in sorted(stock["outcomes"].items()):
        if outcome != "passed":
            continue
        got, message = other["outcomes"].get(test, ["not run", ""])
        if got != "passed":
            out.append({"test": test, "outcome": got, "message": message})
    # A module that no longer imports is one error for all of its tests.
    for test, (got, message) in sorted(other["outcomes"].items()):
        if got == "error" and "::" not in test and test not in stock["outcomes"]:
            out.append({"test": test, "outcome": "collection error", "message": message})
    return out


def extra_compiles(stock: dict, other: dict) -> list[dict]:
    """Tests that compiled more in ``other`` than stock, most first: where a
    mode's compile total above stock comes from. Empty where either run
    predates per-test counts."""
    base, got = stock.get("compiles_by_test") or {}, other.get("compiles_by_test") or {}
    out = [
        {"test": t, "stock": base[t], "mode": n}
        for t, n in got.items()
        if t in base and n > base[t]
    ]
    return sorted(out, key=lambda r: (r["stock"] - r["mode"], r["test"]))


def summarise(profile: str, env: str, suite: str) -> dict | None:
    runs = load(profile, env, suite)
    if not runs:
        return None
    first = next(iter(runs.values()))
    summary = {
        "suite": suite,
        "env": env,
        "profile": profile,
        "versions": first["versions"],
        "modes": {mode: _row(run) for mode, run in runs.items()},
        "finished": {mode: run["finished"] for mode, run in runs.items()},
        "stock_not_passing": None,
        "regressions": {},
    }
    if "stock" in runs:
        stock = runs["stock"]
        summary["stock_not_passing"] = sum(o != "passed" for o, _ in stock["outcomes"].values())
        summary["by_design"] = {}
        summary["extra_compiles"] = {}
        for mode, run in runs.items():
            if mode != "stock":
                extra = extra_compiles(stock, run)
                for r in extra:
                    r["reason"] = compiles_more_by_design(suite, r["test"])
                summary["extra_compiles"][mode] = extra
                lost = regressions(stock, run)
                expected = [r for r in lost if by_design(suite, mode, r["test"])]
                for r in expected:
                    r["reason"] = by_design(suite, mode, r["test"])
                summary["regressions"][mode] = [r for r in lost if r not in expected]
                summary["by_design"][mode] = expected
    out = out_dir(profile)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{suite}-{env}.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / f"{suite}-{env}.md").write_text(render(summary, runs))
    return summary


def _n(value) -> str:
    return "n/a" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def _table(summaries: list[dict], with_suite: bool) -> list[str]:
    head = ["suite"] if with_suite else []
    head += [
        "mode",
        "passed",
        "failed",
        "errors",
        "skipped",
        "wall s",
        "compiles",
        "stablejit hits/misses",
    ]
    # Verify modes' hits traced again and found stale; the column only where one ran.
    verify = any(
        r.get("stablejit_verified") is not None for s in summaries for r in s["modes"].values()
    )
    head += ["verified hits/stale"] if verify else []
    head += [
        "not passing vs stock",
        "by design",
        "run",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in summaries:
        for mode, r in s["modes"].items():
            lost = s["regressions"].get(mode)
            expected = s.get("by_design", {}).get(mode)
            hm = (
                ""
                if r["stablejit_hits"] is None
                else f"{r['stablejit_hits']:,}/{r['stablejit_misses']:,}"
            )
            cells = [s["suite"]] if with_suite else []
            cells += [mode, _n(r["passed"]), _n(r["failed"]), _n(r["errors"]), _n(r["skipped"])]
            cells += [
                f"{r['wall_s']:.0f}",
                _n(r["compiles"]),
                hm,
            ]
            if verify:
                checked = r.get("stablejit_verified")
                cells += ["" if checked is None else f"{checked:,}/{r['stablejit_mismatches']:,}"]
            cells += [
                "" if lost is None else str(len(lost)),
                "" if not expected else str(len(expected)),
                r["status"],
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(summary: dict, runs: dict[str, dict]) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in summary["versions"].items() if v)
    lines = [f"# {summary['suite']} on {summary['env']} ({summary['profile']} profile)", ""]
    lines += [f"Releases: {versions}.", ""]
    for mode, run in runs.items():
        if run.get("shards"):
            revisions = ", ".join(run["stablejit"]) or "none"
            lines += [f"`{mode}` ran in {run['shards']} shards (stablejit {revisions}).", ""]
        if run.get("partial"):
            lines += [f"`{mode}`: only {run['partial']} ran: a part of the suite.", ""]
        pure = without_accelerator(run)
        if pure:
            lines += [f"`{mode}` ran without the C accelerator in: {', '.join(pure)}.", ""]
    lines += _table([summary], with_suite=False)
    lines += [
        "",
        'Skipped counts xfailed too. "not passing vs stock": tests that pass stock but '
        "fail, error, skip or are not reached in that mode.",
        "",
    ]
    if any(mode != base_mode(mode) for mode in runs):
        lines += [
            "Under a verify mode every cache hit is traced again and compared with the program "
            "its entry runs, so a test that counts traces fails there by nature; a stale hit "
            "fails its test with 'stablejit verify mode found … stale hit(s)' and is counted "
            'in "verified hits/stale".',
            "",
        ]
    if summary["stock_not_passing"] is not None:
        lines += [
            f"Stock: {summary['stock_not_passing']:,} tests do not pass (not counted below).",
            "",
        ]
    if "stock" in runs:
        # Upstream failures on this line are the baseline, not stablejit's.
        broken = [
            (t, o, m)
            for t, (o, m) in sorted(runs["stock"]["outcomes"].items())
            if o in ("failed", "error", "crashed")
        ]
        lines += [f"## Fail stock ({len(broken)})", ""]
        for test, outcome, message in broken[:MD_LIMIT]:
            message = message.replace("|", "\\|").replace("`", "'")[:300]
            lines.append(f"- `{test}`: {outcome}" + (f": {message}" if message else ""))
        lines.append("")
    for mode, expected in summary.get("by_design", {}).items():
        if expected:
            lines += [f"## Cannot pass under `{mode}` by design, or flaky ({len(expected)})", ""]
            lines += [f"- `{r['test']}`: {r['reason']}" for r in expected]
            lines.append("")
    for mode, lost in summary["regressions"].items():
        lines += [f"## Pass stock, not under `{mode}` ({len(lost)})", ""]
        for r in lost[:MD_LIMIT]:
            message = r["message"].replace("|", "\\|").replace("`", "'")[:300]
            lines.append(f"- `{r['test']}`: {r['outcome']}" + (f": {message}" if message else ""))
        if len(lost) > MD_LIMIT:
            lines.append(f"- ... {len(lost) - MD_LIMIT} more in the JSON")
        lines.append("")
    for mode, extra in summary.get("extra_compiles", {}).items():
        if extra:
            lines += _extra_compiles(summary["suite"], mode, extra, runs)
    lines += ["## Commands", ""]
    for mode, run in runs.items():
        rev = ", ".join(_as_list(run.get("stablejit") or "?"))
        lines += [
            f"- {mode} ({run['finished']}, stablejit {rev}): `cd {run['workdir']} && {run['command']}`"
        ]
    return "\n".join(lines) + "\n"


def _extra_compiles(suite: str, mode: str, extra: list[dict], runs: dict[str, dict]) -> list[str]:
    """The section on the tests compiling more under ``mode`` than stock:
    those that do by design, by reason, with both totals left without the
    tests so listed; then the others, test by test."""
    more = sum(r["mode"] - r["stock"] for r in extra)
    lines = [f"## Compiling more under `{mode}` than stock ({len(extra)} tests, +{more})", ""]
    designed: dict[str, list[dict]] = {}
    for r in extra:
        if r["reason"]:
            designed.setdefault(r["reason"], []).append(r)
    rest = [r for r in extra if not r["reason"]]
    if designed:
        counts = [runs[m].get("compiles_by_test") or {} for m in ("stock", mode)]
        tests = {t for c in counts for t in c if compiles_more_by_design(suite, t)}
        totals = [sum(n for t, n in c.items() if t not in tests) for c in counts]
        lines += [
            f"Without the {len(tests)} tests listed as compiling more by design, stock compiles "
            f"{totals[0]:,} and `{mode}` {totals[1]:,}.",
            "",
        ]
        for reason, rows in designed.items():
            extra_n = sum(r["mode"] - r["stock"] for r in rows)
            lines += [f"- By design, {len(rows)} tests, +{extra_n}: {reason}."]
        lines.append("")
    lines += [f"- `{r['test']}`: {r['stock']} → {r['mode']}" for r in rest[:MD_LIMIT]]
    if len(rest) > MD_LIMIT:
        lines.append(f"- ... {len(rest) - MD_LIMIT} more in the JSON")
    lines.append("")
    return lines


def write_summary(profile: str, env: str) -> Path | None:
    summaries = [s for s in (summarise(profile, env, name) for name in SUITES) if s]
    if not summaries:
        return None
    path = out_dir(profile) / f"summary-{env}.md"
    lines = [f"# stablejit against upstream suites: {env}, {profile} profile", ""]
    lines += _table(summaries, with_suite=True)
    lines += ["", "Per suite: the `<suite>-" + env + ".md` files beside this one.", ""]
    path.write_text("\n".join(lines))
    return path
