"""The whole benchmark suite, one command.

    python -m benchmarks [--device cpu|gpu|tpu] [--size tiny|4-layer|gpt2-small]
                         [--quick] [--rounds N] [--only a,b] [--skip a,b] [--list]

Runs every case (each a script in this folder, also runnable alone as
``python benchmarks/<case>.py``) in its own process, one after the other, with
one progress line per case on stderr. Each case times its variants
interleaved, round by round, and reports medians and their ratios. Results:
the cases' JSON, markdown tables and PNG plots, and ``suite-<backend>.json``
(environment, what ran, how long, the headline ratios) and
``suite-<backend>.md`` (every table), under ``local-results/benchmarks/``
(ignored by git), or its ``quick/`` folder with ``--quick``. ``--save`` (or
``$STABLEJIT_SAVE_RESULTS=1``) writes them to the committed ``benchmarks/results/``
(``benchmarks/results/quick/``) instead: results are committed only on purpose.

``--quick`` is the short profile (about a minute on two CPU
cores): fewer rounds and calls, the tiny decoder, 1 and 10 MB constants, a
tenth of the memory case; the fresh-process ``persistent`` case is left out.
A full run that saves to ``benchmarks/results/`` also copies the plots to
``docs/assets/benchmarks/`` for the documentation site.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _harness  # noqa: E402

DOCS_ASSETS = HERE.parent / "docs" / "assets" / "benchmarks"


@dataclasses.dataclass
class Case:
    name: str
    script: str
    title: str
    needs: tuple[str, ...] = ()  # importable modules, else the case is skipped
    sized: bool = False  # takes --size (the greedy decoder's)
    quick: bool = True  # part of the --quick profile


CASES = [
    Case("seed", "seed.py", "The seed case: a nested function jitted on every call"),
    Case("seed-percall", "seed_percall.py", "The seed case, call by call"),
    Case("seed-parts", "seed_parts.py", "The seed's loop of calls, piece by piece"),
    Case("anchors", "anchors.py", "Anchors: equinox's filter_jit", needs=("equinox",)),
    Case("optax-step", "optax_step.py", "An optax step built per call", needs=("optax",)),
    Case("scaling", "scaling.py", "Fingerprint cost vs closure size"),
    Case(
        "modules",
        "modules.py",
        "Models in closures: nnx, equinox, split/merge vs layers",
        needs=("flax", "equinox"),
    ),
    Case("constants", "constants.py", "A large closed-over array: baked or lifted"),
    Case("greedy", "greedy.py", "Greedy decoding shaped like HuggingFace's", sized=True),
    Case(
        "hf-generate",
        "hf_generate.py",
        "HuggingFace transformers' Flax generate()",
        needs=("transformers", "flax"),
    ),
    Case("observability", "observability.py", "Cost of observability on the hit path"),
    Case("memory", "memory.py", "Memory"),
    Case(
        "persistent",
        "persistent.py",
        "First call in a fresh process",
        sized=True,
        quick=False,
    ),
]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--device", choices=list(_harness.PLATFORMS), default="cpu")
    p.add_argument("--size", choices=["tiny", "4-layer", "gpt2-small"], default=None)
    p.add_argument("--quick", action="store_true", help="the short profile (< 2 min on 2 cores)")
    p.add_argument("--rounds", type=int, default=None, help="rounds for every case")
    p.add_argument("--out", type=Path, default=None, help="default: see --save")
    p.add_argument("--save", action="store_true", help=_harness.SAVE_HELP)
    p.add_argument("--only", default="", help="comma-separated case names")
    p.add_argument("--skip", default="", help="comma-separated case names")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    args = p.parse_args()
    if args.out is None:
        base = _harness.results_dir(args.save)
        args.out = base / "quick" if args.quick else base
    names = {c.name for c in CASES}
    for opt in (args.only, args.skip):
        unknown = {n for n in opt.split(",") if n} - names
        if unknown:
            p.error(f"unknown case(s) {sorted(unknown)}; cases: {sorted(names)}")
    return args


def selected(args) -> list[tuple[Case, str | None]]:
    """The cases to run, each with the reason it is skipped, or None."""
    only = {n for n in args.only.split(",") if n}
    skip = {n for n in args.skip.split(",") if n}
    out = []
    for c in CASES:
        if (only and c.name not in only) or c.name in skip:
            continue
        missing = [m for m in c.needs if importlib.util.find_spec(m) is None]
        if missing:
            out.append((c, f"skipped: {', '.join(missing)} not installed"))
        elif args.quick and not c.quick and c.name not in only:
            out.append((c, "skipped: not in the --quick profile"))
        else:
            out.append((c, None))
    return out


def command(case: Case, args) -> list[str]:
    cmd = [sys.executable, str(HERE / case.script), "--device", args.device, "--out", str(args.out)]
    if args.quick:
        cmd.append("--quick")
    if args.rounds:
        cmd += ["--rounds", str(args.rounds)]
    if case.sized and args.size:
        cmd += ["--size", args.size]
    return cmd


def run_case(case: Case, args) -> dict:
    with tempfile.NamedTemporaryFile("r", suffix=".manifest") as manifest:
        env = dict(os.environ, **{_harness.MANIFEST: manifest.name})
        env.setdefault("PYTHONUNBUFFERED", "1")
        start = time.perf_counter()
        proc = subprocess.run(
            command(case, args), cwd=HERE.parent, env=env, capture_output=True, text=True
        )
        wall = time.perf_counter() - start
        files = [Path(line) for line in manifest.read().splitlines() if line]
    return {
        "status": "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})",
        "wall_s": wall,
        "files": [str(f) for f in files],
        "output": proc.stdout + proc.stderr,
    }


def _progress(text: str, final: bool) -> None:
    """One line per case: overwritten in place on a terminal, printed once otherwise."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K" + text + ("\n" if final else ""))
        sys.stderr.flush()
    elif final:
        print(text, file=sys.stderr, flush=True)


def _fmt_ratio(r: float) -> str:
    return f"{r:.2f}×" if r < 10 else f"{r:,.0f}×"


def headline(payloads: dict[str, dict]) -> list[tuple[str, str, str]]:
    """(case, what, ratio) rows from each case's JSON."""
    rows = []
    for name, p in payloads.items():
        if name == "scaling":
            for kind, r in p["results"].items():
                for n, ratio in zip(r["n"], r["ratio"], strict=True):
                    rows.append((name, f"{kind}, N = {n:,}: stable_jit / jax.jit", ratio))
        elif name == "constants":
            for size, r in p["ratios"].items():
                for what, ratio in r.items():
                    rows.append((name, f"{size}: {what.replace('_', ' ')} (first call)", ratio))
        elif name == "persistent":
            for case, r in p["results"].items():
                rows.append((name, f"{case}: stablejit / JAX cache", r["stablejit_over_jax_cache"]))
        else:
            for what, ratio in p.get("ratios", {}).items():
                rows.append((name, what.replace("_", " "), ratio))
    return [(c, w, _fmt_ratio(r)) for c, w, r in rows]


def _case_table(md: Path) -> str:
    """A case's markdown without its title and environment lines."""
    lines = md.read_text().strip().splitlines()
    body = [ln for ln in lines[1:] if not (ln.startswith("_") and ln.endswith("_"))]
    return "\n".join(body).strip()


def write_suite(args, results: dict, env: dict, wall: float) -> tuple[Path, Path]:
    payloads, tables, plots = {}, {}, []
    for name, r in results.items():
        for f in map(Path, r.get("files", [])):
            if f.suffix == ".json":
                payloads[name] = json.loads(f.read_text())
            elif f.suffix == ".md":
                tables[name] = _case_table(f)
            elif f.suffix == ".png":
                plots.append(f)
    profile = "quick" if args.quick else "full"
    stem = _harness.stem("suite")
    summary = {
        "benchmark": "suite",
        "profile": profile,
        "environment": env,
        "command": "python -m benchmarks " + " ".join(sys.argv[1:]),
        "wall_s": wall,
        "cases": {
            n: {"status": r["status"], "wall_s": r.get("wall_s"), "files": _rel(r.get("files", []))}
            for n, r in results.items()
        },
        "ratios": {n: p.get("ratios") for n, p in payloads.items() if "ratios" in p},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"{stem}.json"
    json_path.write_text(json.dumps(summary, indent=2) + "\n")
    titles = {c.name: c.title for c in CASES}
    env_line = ", ".join(f"{k} {v}" for k, v in env.items())
    md = [
        f"# Benchmark suite ({env['backend']}, {profile} profile)",
        "",
        f"`{summary['command'].strip()}`: {wall / 60:.1f} min. _{env_line}_",
        "",
        "Each case runs in its own process and times its variants interleaved, round by "
        "round; the figures are medians, and on a shared machine only their ratios mean much.",
        "",
        "## Headline ratios",
        "",
        "<!-- --8<-- [start:headline] -->",
        "| case | ratio | value |",
        "|---|---|---:|",
        *(f"| {c} | {w} | {r} |" for c, w, r in headline(payloads)),
        "<!-- --8<-- [end:headline] -->",
        "",
        "## Results by case",
        "",
        "<!-- --8<-- [start:tables] -->",
    ]
    for name, r in results.items():
        md += ["", f"### {titles[name]} (`{name}`)", ""]
        if name in tables:
            md.append(tables[name])
        else:
            md.append(f"_{r['status']}_")
    md += ["", "<!-- --8<-- [end:tables] -->", ""]
    if plots:
        md += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    md_path = args.out / f"{stem}.md"
    md_path.write_text("\n".join(md))
    return json_path, md_path


def _rel(files: list[str]) -> list[str]:
    """Paths relative to the repository, where they are inside it."""
    root = HERE.parent
    out = []
    for f in map(Path, files):
        try:
            out.append(str(f.resolve().relative_to(root)))
        except ValueError:
            out.append(str(f))
    return out


def main():
    args = parse_args()
    cases = selected(args)
    if args.list:
        for c, why in cases:
            print(f"{c.name:15} benchmarks/{c.script:18} {c.title}" + (f"  [{why}]" if why else ""))
        return
    os.environ["JAX_PLATFORMS"] = _harness.PLATFORMS[args.device]
    start = time.perf_counter()
    results: dict[str, dict] = {}
    failed = []
    for i, (case, why) in enumerate(cases, 1):
        tag = f"[{i}/{len(cases)}] {case.name}"
        if why:
            results[case.name] = {"status": why}
            _progress(f"{tag}: {why}", final=True)
            continue
        _progress(f"{tag}: running…", final=False)
        r = run_case(case, args)
        results[case.name] = r
        outs = ", ".join(Path(f).name for f in r["files"] if not f.endswith(".md"))
        _progress(f"{tag}: {r['status']} in {r['wall_s']:.1f} s  {outs}", final=True)
        if r["status"] != "ok":
            failed.append(case.name)
            print("\n".join(r["output"].splitlines()[-25:]), file=sys.stderr)
    wall = time.perf_counter() - start
    env = _harness.environment()
    json_path, md_path = write_suite(args, results, env, wall)
    if not args.quick and args.out.resolve() == _harness.RESULTS.resolve():
        DOCS_ASSETS.mkdir(parents=True, exist_ok=True)
        for r in results.values():
            for f in r.get("files", []):
                if f.endswith(".png"):
                    shutil.copy2(f, DOCS_ASSETS / Path(f).name)
    print(
        f"suite: {wall / 60:.1f} min, {len(failed)} failed; wrote {json_path} and {md_path.name}",
        file=sys.stderr,
    )
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
