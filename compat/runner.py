"""One upstream suite, in one environment, in one mode: a pytest subprocess.

Its raw result lands in ``<results>/raw/<profile>/<env>/<suite>/<mode>.json``
(``<results>``: ``suites.results_root()``)
(per-test outcomes, counts, wall time, the census counters), beside the
pytest log and the per-test JSON lines (both gitignored). A raw result is
reused while its ``key`` (releases, selection, deselections) is unchanged, so
``--only numpyro --modes jit`` compares against the stock run already there.

A suite too long for one sitting runs in shards (``--shard I/N``): shard I
takes every N-th of the suite's test files, in sorted order (or, for a suite
sharded by test, the tests whose id hashes to I; see the outcome plugin), and
writes ``<mode>.shard-IofN.json``; the report merges a mode's shards once all
N are there (see :func:`compat.report.load`). A shard still too long (one
file of long tests) runs in parts (``--part J/M``: its tests whose id hashes,
another hash, to J), written ``<mode>.shard-IofN.part-JofM.json``, which make
the shard once all M are there.

A test that kills pytest (a segmentation fault in XLA's compiler, seen in
diffrax's suite stock too) would end the run and lose every test after it.
So a run killed by a signal in a test starts again without that test, which
is recorded as ``crashed`` (see :func:`run`); the result is the last, whole
run's, its census and counts complete.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

from compat.suites import COMPAT, REPO, Suite, base_mode, results_root, selection

PLUGIN_DIR = COMPAT / "_plugin"


def plugin_available() -> bool:
    """The census plugin (``stablejit.pytest``) is in this checkout, which
    every environment has installed editable."""
    return (REPO / "stablejit" / "pytest.py").exists()


def mode_args(mode: str, census_path: Path) -> list[str]:
    """The one place a mode becomes pytest options.

    With the census plugin, stock runs as ``--stablejit=off`` (plain jax.jit,
    only counted) so that every mode reports its compiles; without it (before
    it existed), stock is plain pytest and the other modes cannot run."""
    if not plugin_available():
        if mode != "stock":
            raise SystemExit(f"compat: mode {mode!r} needs stablejit/pytest.py (the census plugin)")
        return []
    flag = {"stock": "off", "jit": "jit", "patch": "patch"}[base_mode(mode)]
    verify = ["--stablejit-verify=1"] if mode != base_mode(mode) else []
    return [
        "-p",
        "stablejit.pytest",
        f"--stablejit={flag}",
        f"--stablejit-report={census_path}",
    ] + verify


@dataclasses.dataclass
class Job:
    suite: Suite
    env: str
    mode: str
    profile: str
    workdir: Path
    base: Path
    python: Path
    versions: dict[str, str | None]
    timeout: int
    shard: tuple[int, int] | None = None
    part: tuple[int, int] | None = None  # of the shard (see compat.report.load)

    @property
    def raw_dir(self) -> Path:
        return results_root() / "raw" / self.profile / self.env / self.suite.name

    @property
    def stem(self) -> str:
        """The raw result's file name, without its extension."""
        if self.shard is None:
            return self.mode
        stem = f"{self.mode}.shard-{self.shard[0]}of{self.shard[1]}"
        return stem if self.part is None else f"{stem}.part-{self.part[0]}of{self.part[1]}"

    def targets(self) -> tuple[list[str], list[str]]:
        """(pytest arguments naming the tests, deselection arguments)."""
        paths, k = selection(self.suite, self.profile)
        if self.shard is not None and self.suite.shard_by == "file":
            i, n = self.shard
            paths = tuple(test_files(self.base, paths, self.suite.deselect)[i - 1 :: n])
        args = [self._path(p) for p in paths]
        if k:
            args += ["-k", k]
        drop = []
        for target in self.suite.deselect:
            if "::" in target:
                drop += ["--deselect", self._path(target)]
            elif (self.base / target).exists():
                drop += ["--ignore", self._path(target)]
        return args, drop

    def _path(self, rel: str) -> str:
        # Relative to the workdir where possible: nodeids stay short and the
        # same across machines; optax's live in the environment's site-packages.
        # Real paths, as for the rootdir (see `run`): through a worktree's
        # link they would name files pytest does not find under its rootdir.
        full = (self.base / rel if rel else self.base).resolve()
        try:
            return str(full.relative_to(self.workdir.resolve()))
        except ValueError:
            return str(full)

    def key(self) -> str:
        paths, k = selection(self.suite, self.profile)
        # A stablejit mode's outcome depends on stablejit itself: a result is
        # reused only for the revision it ran against.
        revision = None if self.mode == "stock" else _stablejit_revision()
        blob = json.dumps(
            [
                self.versions,
                paths,
                k,
                sorted(self.suite.deselect),
                plugin_available(),
                revision,
                # Since the plugin seeds each test (compat_outcomes._seed), an
                # earlier unseeded stock run is no baseline for a seeded mode.
                "seeded per test",
                *([list(self.shard)] if self.shard else []),
                *([list(self.part)] if self.part else []),
            ],
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def cached(self) -> dict | None:
        path = self.raw_dir / f"{self.stem}.json"
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        # pytest's internal and usage errors (3, 4), such as stablejit failing
        # to import mid-edit, say nothing about the suite: run those again.
        broken = not raw.get("outcomes") or raw.get("returncode") in (3, 4)
        return raw if raw.get("key") == self.key() and not broken else None


MAX_CRASHES = 5
"""Crashed tests a run goes on without before it stops where it is."""


def run(job: Job) -> dict:
    """Runs ``job`` (never more than its timeout) and writes its raw result.

    A pytest killed by a signal while a test ran is run again from the
    start without that test (at most :data:`MAX_CRASHES` times), which then
    counts as ``crashed``."""
    job.raw_dir.mkdir(parents=True, exist_ok=True)
    lines = job.raw_dir / f"{job.stem}.jsonl"
    census = job.raw_dir / f"{job.stem}.census.json"
    log = job.raw_dir / f"{job.stem}.log"
    skip = job.raw_dir / f"{job.stem}.crashed"
    for stale in (lines, census, skip):
        stale.unlink(missing_ok=True)
    targets, drop = job.targets()
    cmd = [str(job.python), "-m", "pytest", "-p", "compat_outcomes", "-p", "no:cacheprovider"]
    # Named explicitly: pytest would otherwise look for configuration above
    # the test paths, and find this repository's own pyproject.toml there.
    # Real paths: a worktree sharing .cache through a link would otherwise
    # give pytest a rootdir its test paths are not under (node ids lose their files).
    workdir = job.workdir.resolve()
    config = workdir / (job.suite.config_files or ("pytest.ini",))[0]
    rootdir = job.base.resolve().parent if job.suite.source == "package" else workdir
    cmd += ["-c", str(config), f"--rootdir={rootdir}", "--color=no", "-rN"]
    cmd += [*mode_args(job.mode, census), *drop, *targets]
    env = dict(os.environ)
    # Only the plugin's folder and this checkout's package, not the repository
    # root: it has a `tests` package of its own.
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGIN_DIR), str(_this_checkout())])
    env["COMPAT_OUTCOMES"] = str(lines)
    env["COMPAT_CRASHED"] = str(skip)
    if job.shard is not None and job.suite.shard_by == "test":
        env["COMPAT_SHARD"] = "{}/{}".format(*job.shard)
    if job.part is not None:
        env["COMPAT_PART"] = "{}/{}".format(*job.part)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing written into site-packages
    revision = _stablejit_revision()
    # The key as the run starts: the revision it names is the code pytest
    # imports, even where a commit lands while the suite runs.
    key = job.key()
    start = time.monotonic()
    crashed: list[tuple[str, str]] = []  # (test, signal)
    with open(log, "w", encoding="utf-8") as out:
        while True:
            out.write(f"$ cd {workdir} && {' '.join(cmd)}\n")
            out.flush()
            left = max(1.0, job.timeout - (time.monotonic() - start))
            returncode, timed_out = _pytest(cmd, workdir, env, out, left)
            test = _running(lines) if returncode < 0 and not timed_out else None
            if test is None or len(crashed) >= MAX_CRASHES:
                break
            name = _signal_name(-returncode)
            crashed.append((test, name))
            out.write(f"\n[compat] {test} killed pytest ({name}): running again without it\n\n")
            with open(skip, "a", encoding="utf-8") as f:
                f.write(test + "\n")
            lines.unlink(missing_ok=True)
    wall = time.monotonic() - start
    outcomes, compiles = _read_outcomes(lines)
    for test, name in crashed:
        outcomes[test] = ["crashed", f"pytest died of {name} in this test (run again without it)"]
    counts = collections.Counter(outcome for outcome, _ in outcomes.values())
    raw = {
        "suite": job.suite.name,
        "env": job.env,
        "mode": job.mode,
        "profile": job.profile,
        "shard": list(job.shard) if job.shard else None,
        "part": list(job.part) if job.part else None,
        "key": key,
        "versions": job.versions,
        "command": " ".join(cmd),
        "workdir": str(job.workdir),
        "returncode": returncode,
        "timed_out": timed_out,
        "wall_s": round(wall, 1),
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "stablejit": revision,
        "counts": dict(sorted(counts.items())),
        "census": _census(census),
        "outcomes": outcomes,
        "compiles_by_test": compiles,
    }
    (job.raw_dir / f"{job.stem}.json").write_text(json.dumps(raw, indent=1, sort_keys=True) + "\n")
    return raw


def _pytest(cmd, workdir, env, out, timeout: float) -> tuple[int, bool]:
    """``(returncode, timed out)`` of one pytest run, its output into ``out``."""
    proc = subprocess.Popen(
        cmd,
        cwd=workdir,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # so a timeout ends pytest and anything it started
    )
    try:
        return proc.wait(timeout=timeout), False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(), True


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _running(path: Path) -> str | None:
    """The test that had started and not ended when its run stopped, if any."""
    running = None
    for entry in _entries(path):
        if entry["outcome"] == "started":
            running = entry["id"]
        elif entry["id"] == running:
            running = None
    return running


def _entries(path: Path):
    """The plugin's lines in ``path``, read (none if there is no file)."""
    if not path.exists():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:  # the last line of a killed run
            continue


def test_files(base: Path, paths: tuple[str, ...], deselect: dict[str, str]) -> list[str]:
    """The test files under ``paths`` (relative to ``base``), sorted, less
    deselected files and folders: what shards divide."""
    out = set()
    for rel in paths:
        full = base / rel if rel else base
        found = [full] if full.is_file() else [*full.rglob("test_*.py"), *full.rglob("*_test.py")]
        out.update(str(f.relative_to(base)) for f in found)
    dropped = [d for d in deselect if "::" not in d]
    return sorted(
        f for f in out if not any(f == d or f.startswith(d.rstrip("/") + "/") for d in dropped)
    )


def _read_outcomes(path: Path) -> tuple[dict[str, list[str]], dict[str, int]]:
    """``({nodeid: [outcome, first error line]}, {nodeid: compiles})``; a
    later phase's failure (an error in teardown after a pass) wins over the
    earlier outcome."""
    rank = {"passed": 0, "skipped": 0, "xfailed": 0, "xpassed": 1, "failed": 2, "error": 3}
    out: dict[str, list[str]] = {}
    compiles: dict[str, int] = {}
    for entry in _entries(path):
        if entry["outcome"] == "started":  # (see _running)
            continue
        prev = out.get(entry["id"])
        if prev is None or rank[entry["outcome"]] > rank[prev[0]]:
            out[entry["id"]] = [entry["outcome"], entry["message"]]
        if "compiles" in entry:
            compiles[entry["id"]] = entry["compiles"]
    return out, compiles


def _census(path: Path) -> dict | None:
    """The counters the summary shows, from the plugin's report."""
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    keep = ("traces", "compiles", "jit_objects", "redefined_codes", "retraces", "compile_seconds")
    out = {k: report.get(k) for k in keep}
    sj = report.get("stablejit") or {}
    counted = ("hits", "misses", "compiles", "verified", "mismatches", "accelerator")
    out.update({f"stablejit_{k}": sj.get(k) for k in counted if k in sj})
    return out


def _this_checkout() -> Path:
    """A folder holding only a link to this checkout's ``stablejit``.

    The environments have stablejit installed editable from whichever
    checkout created them; a path entry is searched before that install's
    finder, so a run always tests the code beside the harness, and a second
    checkout (a git worktree sharing ``.envs``) can run a fixed revision in
    the background while this one is edited."""
    folder = COMPAT / ".stablejit-path"
    link = folder / "stablejit"
    if not link.is_symlink():
        folder.mkdir(exist_ok=True)
        try:
            link.symlink_to(REPO / "stablejit", target_is_directory=True)
        except FileExistsError:  # another job's thread (--jobs) made it meanwhile
            pass
    return folder


def _stablejit_revision() -> str:
    """The last commit that touched stablejit/, plus a digest of uncommitted
    edits there ("+dirty.<digest>"): runs use the editable checkout as it
    stood when they started, and it may be mid-edit."""
    git = ["git", "-C", str(REPO)]
    last = subprocess.run(
        [*git, "log", "-1", "--format=%h", "--", "stablejit"], capture_output=True, text=True
    ).stdout.strip()
    diff = subprocess.run(
        [*git, "diff", "HEAD", "--", "stablejit"], capture_output=True, text=True
    ).stdout
    new = subprocess.run(
        [*git, "ls-files", "--others", "--exclude-standard", "stablejit"],
        capture_output=True,
        text=True,
    ).stdout
    for name in new.split():  # files not yet added count too
        diff += name + (REPO / name).read_text(encoding="utf-8", errors="replace")
    if not diff:
        return last
    return f"{last}+dirty.{hashlib.sha256(diff.encode()).hexdigest()[:8]}"
