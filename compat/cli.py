"""The command line: environments, sources, jobs, summaries, in that order."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from compat import envs, report, runner, sources
from compat.suites import (
    ALL_MODES,
    DEFAULT_ENV,
    ENVS,
    MODES,
    QUICK_SUITES,
    SAVE_VARIABLE,
    SUITE_TABLE,
    SUITES,
)

QUICK_TIMEOUT = 240  # seconds per suite and mode; the whole quick profile aims at 5 minutes


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python compat/run.py",
        description="Run optax, blackjax, numpyro and flax's own test suites stock, with "
        "jax.jit replaced by stablejit.stable_jit (jit), and under stablejit.patch() (patch).",
    )
    p.add_argument("--quick", action="store_true", help="a few fast files per suite (minutes)")
    p.add_argument("--env", choices=sorted(ENVS), help="default: main (quick), py312-jax012 (full)")
    p.add_argument("--only", help="comma-separated suites (default: all): " + ",".join(SUITES))
    p.add_argument(
        "--modes",
        default=",".join(MODES),
        help="comma-separated: stock,jit,patch (default), jit-verify,patch-verify (verify mode: "
        "every hit traced again and compared; a stale hit fails its test)",
    )
    p.add_argument("--jobs", type=int, default=1, help="pytest processes at once (default 1)")
    p.add_argument(
        "--rerun", action="store_true", help="rerun even where a matching raw result exists"
    )
    p.add_argument(
        "--save",
        action="store_true",
        help="read and write the committed compat/results/ (also $STABLEJIT_SAVE_RESULTS=1); "
        "by default results go to the ignored local-results/compat/",
    )
    p.add_argument(
        "--shard",
        help="I/N: run shard I of N (every N-th test file); a mode's shards are merged in the "
        "summary once all N have run",
    )
    p.add_argument(
        "--part",
        help="J/M, with --shard: run part J of M of that shard (its tests split by a hash of "
        "their id), for a shard longer than one sitting; the shard counts as run once all M "
        "parts have",
    )
    p.add_argument(
        "--git-dir",
        action="append",
        default=[],
        metavar="SUITE=PATH",
        help="a clone (bare or not) of a tag suite's upstream repository, instead of cloning it "
        "into compat/.cache/git/ (also $COMPAT_GIT_<SUITE>)",
    )
    p.add_argument(
        "--setup-only", action="store_true", help="create the environment and sources, run nothing"
    )
    p.add_argument(
        "--report-only", action="store_true", help="rewrite the summaries from raw results"
    )
    return p


def _split(value: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad:
        raise SystemExit(f"compat: unknown {what} {bad}; choose from {', '.join(allowed)}")
    return items


def _shard(value: str, flag: str = "--shard") -> tuple[int, int]:
    try:
        i, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise SystemExit(f"compat: {flag} takes I/N (such as 2/8), got {value!r}") from None
    if not 1 <= i <= n:
        raise SystemExit(f"compat: {flag} {value}: I must be between 1 and N")
    return i, n


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.save:
        os.environ[SAVE_VARIABLE] = "1"  # read by suites.results_root()
    profile = "quick" if args.quick else "full"
    env = ENVS[args.env or DEFAULT_ENV[profile]]
    # Suites pinned on this environment's line; the quick profile's default
    # leaves out the suites read from release tags (CI cannot fetch them).
    here = tuple(name for name in SUITES if name in env.pins)
    default = [name for name in here if profile == "full" or name in QUICK_SUITES]
    suites = _split(args.only, here, "suite") if args.only else default
    for item in args.git_dir:
        name, _, path = item.partition("=")
        os.environ[f"COMPAT_GIT_{name.strip().upper()}"] = path.strip()
    modes = _split(args.modes, ALL_MODES, "mode")
    shard = _shard(args.shard) if args.shard else None
    if args.part and shard is None:
        raise SystemExit("compat: --part splits a shard: give --shard too (1/1 for a whole suite)")
    part = _shard(args.part, "--part") if args.part else None
    if args.report_only:
        print(report.write_summary(profile, env.name))
        return 0
    if not runner.plugin_available() and modes != ["stock"]:
        print("[compat] stablejit/pytest.py not found: running stock only", file=sys.stderr)
        modes = ["stock"]

    # Every suite's dependencies, whatever --only says: one install per
    # environment, not one per subset.
    versions = envs.ensure(env, list(here))
    python = envs.python_of(env)
    jobs = []
    for name in suites:
        suite = SUITE_TABLE[name]
        version = versions[name]
        if version != env.pins[name]:
            print(
                f"[compat] {env.name}: {name} {version} installed, pinned {env.pins[name]}",
                file=sys.stderr,
            )
        workdir, base = sources.layout(suite, version, python)
        suite_versions = {"python": _python_version(env), "jax": versions["jax"], name: version}
        if name == "optax":
            suite_versions["flax"] = versions.get("flax")  # optax's tests import it
        timeout = QUICK_TIMEOUT if profile == "quick" else suite.full_timeout
        for mode in modes:
            job = runner.Job(
                suite,
                env.name,
                mode,
                profile,
                workdir,
                base,
                python,
                suite_versions,
                timeout,
                shard,
                part,
            )
            if shard is not None and not job.targets()[0]:
                print(
                    f"[compat] {name}/{mode}: shard {args.shard} holds no test file",
                    file=sys.stderr,
                )
                continue
            if not args.rerun and job.cached() is not None:
                print(
                    f"[compat] {name}/{mode}: reusing {job.raw_dir}/{job.stem}.json",
                    file=sys.stderr,
                )
                continue
            jobs.append(job)
    if args.setup_only:
        print(
            f"[compat] {env.name} ready at {env.path}; {len(jobs)} run(s) pending", file=sys.stderr
        )
        return 0

    summary_lock = threading.Lock()

    def one(job: runner.Job) -> None:
        print(
            f"[compat] {job.suite.name}/{job.mode}: running (log {job.raw_dir}/{job.stem}.log)",
            file=sys.stderr,
            flush=True,
        )
        raw = runner.run(job)
        status = "TIMED OUT" if raw["timed_out"] else f"exit {raw['returncode']}"
        print(
            f"[compat] {job.suite.name}/{job.mode}: {raw['counts']} in {raw['wall_s']}s ({status})",
            file=sys.stderr,
            flush=True,
        )
        with summary_lock:  # two modes of one suite may finish together under --jobs
            report.summarise(profile, env.name, job.suite.name)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(one, jobs))
    path = report.write_summary(profile, env.name)
    if path is not None:
        print(path.read_text())
    # Exit 1 on any test that passes stock but not in a mode, unless listed
    # as not passable by design: CI runs the quick profile as a gate.
    lost = {
        f"{name}/{mode}": len(tests)
        for name in suites
        if (s := report.summarise(profile, env.name, name)) is not None
        for mode, tests in s["regressions"].items()
        if mode in modes and tests
    }
    if lost:
        print(f"[compat] diverging from stock: {lost}", file=sys.stderr)
        return 1
    return 0


def _python_version(env) -> str:
    out = subprocess.run(
        [str(envs.python_of(env)), "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()
