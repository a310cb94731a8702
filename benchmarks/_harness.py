"""Shared benchmark plumbing: interleaved timing rounds, device choice, result files."""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The committed results, which the README and docs link: written only on purpose (--save).
RESULTS = ROOT / "benchmarks" / "results"
# Where a run writes by default: ignored by git, so running the benchmarks (the demo, the
# test command's quick profile) leaves the checkout clean.
LOCAL = ROOT / "local-results" / "benchmarks"
SAVE_VARIABLE = "STABLEJIT_SAVE_RESULTS"


def saving(save_flag: bool) -> bool:
    """Whether to write the committed results: ``--save``, or ``$STABLEJIT_SAVE_RESULTS=1``."""
    return save_flag or os.environ.get(SAVE_VARIABLE, "") not in ("", "0")


def results_dir(save_flag: bool) -> Path:
    """The folder a run writes to when no ``--out`` is given."""
    return RESULTS if saving(save_flag) else LOCAL


SAVE_HELP = (
    "write to the committed benchmarks/results/ (also $STABLEJIT_SAVE_RESULTS=1); "
    "by default results go to the ignored local-results/benchmarks/"
)


PLATFORMS = {"cpu": "cpu", "gpu": "cuda", "tpu": "tpu"}


def parse_args(description: str, **defaults) -> argparse.Namespace:
    """The common options, then ``extra`` ones; sets ``JAX_PLATFORMS`` before jax is imported.

    ``rounds`` is the default number of rounds, ``quick_rounds`` the one under
    ``--quick`` (each case's short profile, used by ``python -m benchmarks --quick``).
    """
    p = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", choices=list(PLATFORMS), default="cpu")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--quick", action="store_true", help="the short profile")
    p.add_argument("--out", type=Path, default=None, help="default: see --save")
    p.add_argument("--save", action="store_true", help=SAVE_HELP)
    p.add_argument(
        "--host-devices", type=int, default=0, help="split the CPU into N devices (XLA_FLAGS)"
    )
    for name, help_text in defaults.get("extra", {}).items():
        p.add_argument(f"--{name}", default=None, help=help_text)
    args = p.parse_args()
    if args.out is None:
        args.out = results_dir(args.save)
    if args.rounds is None:
        rounds = defaults.get("rounds", 15)
        args.rounds = defaults.get("quick_rounds", rounds) if args.quick else rounds
    # Must happen before jax is imported anywhere.
    os.environ["JAX_PLATFORMS"] = PLATFORMS[args.device]
    if args.host_devices:
        flag = f"--xla_force_host_platform_device_count={args.host_devices}"
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()
    return args


def data_sharding():
    """A sharding that splits axis 0 over every device, or None on one device."""
    import jax
    import numpy as np

    if jax.device_count() == 1:
        return None
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))


def interleaved(variants: dict[str, tuple[Callable[[], object], int]], rounds: int) -> dict:
    """Per-call seconds of each variant: median over ``rounds`` rounds.

    ``variants`` maps a name to ``(call, calls_per_round)``. Every round times
    every variant once, in rotating order, so drift in the machine's speed
    hits all variants alike.
    """
    names = list(variants)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            call, n = variants[name]
            t0 = time.perf_counter()
            for _ in range(n):
                call()
            samples[name].append((time.perf_counter() - t0) / n)
    return {
        n: {"median_s": statistics.median(s), "min_s": min(s), "rounds": len(s)}
        for n, s in samples.items()
    }


def import_copy(rev: str, name: str):
    """stablejit as of ``rev`` (from ``git archive``; or, where ``rev`` is a
    folder holding ``stablejit/``, as that folder has it: a machine without
    the repository's history), imported as the package ``name``."""
    where = Path(tempfile.mkdtemp())
    if (Path(rev) / "stablejit").is_dir():
        shutil.copytree(Path(rev) / "stablejit", where / name)
    else:
        data = subprocess.run(
            ["git", "archive", "--format=tar", rev, "stablejit"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(where, filter="data")
        (where / "stablejit").rename(where / name)
    _build_accelerator(where, name)
    sys.path.insert(0, str(where))
    return importlib.import_module(name)


def _build_accelerator(where: Path, name: str) -> None:
    """Builds the copy's C accelerator, as its install would (where a
    compiler is present; without one the copy runs its pure-Python path, as
    its install would), so that A/B compares like with like."""
    sources = sorted(str(p.relative_to(where)) for p in (where / name / "_speedups_c").glob("*.c"))
    if not sources or os.environ.get("STABLEJIT_PURE_PYTHON"):
        return
    setup = (
        "from setuptools import Extension, setup; "
        f"setup(ext_modules=[Extension({name + '._speedups'!r}, {sources!r}, optional=True)])"
    )
    subprocess.run(
        [sys.executable, "-c", setup, "build_ext", "--inplace", "-q"],
        cwd=where,
        capture_output=True,
        check=False,
    )


def nested_outer(stable_jit):
    """The seed case's ``outer``: ``inner`` redefined on every call, jitted with ``stable_jit``."""

    def outer(a):
        def inner(x):
            return x * 2

        return stable_jit(inner)(a)

    return outer


def python_floor(target):
    """The seed case's floor: an ``outer(a)`` that defines ``inner`` and calls
    it through a do-nothing Python wrapper forwarding to ``target`` (a hoisted
    ``jax.jit``), the least any wrapper written in Python does."""

    class Forward:
        __slots__ = ("fun",)

        def __init__(self, fun):
            self.fun = fun

        def __call__(self, *args, **kwargs):
            return target(*args, **kwargs)

    def outer(a):
        def inner(x):
            return x * 2

        return Forward(inner)(a)

    return outer


def hit_batch(outer, a, n: int, config, explain: bool = False):
    """A variant for :func:`interleaved`: one timed call runs ``n`` hits of
    ``outer(a)``, each waited for, with ``config.explain_misses`` switched once
    around them, so the switch is not part of what is measured."""

    def run():
        config.explain_misses = explain
        try:
            for _ in range(n):
                outer(a).block_until_ready()
        finally:
            config.explain_misses = False

    return run, 1


def environment() -> dict:
    import jax
    import jaxlib

    return {
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "backend": jax.default_backend(),
        "device": str(jax.devices()[0].device_kind),
        "devices": jax.device_count(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }


def fmt_time(s: float) -> str:
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.1f} µs"


def stem(name: str) -> str:
    """``<name>-<backend>``, with ``-<n>dev`` when there are several devices."""
    import jax

    n = jax.device_count()
    return f"{name}-{jax.default_backend()}" + (f"-{n}dev" if n > 1 else "")


def _record(path: Path) -> None:
    """Tells ``python -m benchmarks`` (through $STABLEJIT_BENCH_MANIFEST) what a case wrote."""
    manifest = os.environ.get(MANIFEST)
    if manifest:
        with open(manifest, "a") as f:
            f.write(f"{path}\n")


MANIFEST = "STABLEJIT_BENCH_MANIFEST"


def write(name: str, out: Path, payload: dict, table: str) -> None:
    """Writes ``<name>.json`` and ``<name>.md`` (the table plus environment)."""
    out.mkdir(parents=True, exist_ok=True)
    backend = payload["environment"]["backend"]
    s = stem(name)
    (out / f"{s}.json").write_text(json.dumps(payload, indent=2) + "\n")
    env = ", ".join(f"{k} {v}" for k, v in payload["environment"].items())
    (out / f"{s}.md").write_text(f"# {name} ({backend})\n\n{table}\n\n_{env}_\n")
    _record(out / f"{s}.json")
    _record(out / f"{s}.md")
    print(table)
    print(f"\nwrote {out / s}.json and .md")


def write_per_call(
    name: str,
    args: argparse.Namespace,
    timings: dict,
    traces: dict,
    calls: dict,
    ratios: dict,
    notes: list[str],
    intro: str = "",
    **extra,
) -> None:
    """Writes a case that times variants per call: a row per variant (median,
    and traces / calls where counted), then ``notes`` (its ratios in words);
    the JSON holds it all, and ``extra`` (versions of what it compares)."""
    rows = [intro, ""] if intro else []
    rows += ["| variant | per call (median) | traces / calls |", "|---|---:|---:|"]
    for n, timing in timings.items():
        counted = f"{traces[n]} / {calls[n]}" if n in traces else ""
        rows.append(f"| {n} | {fmt_time(timing['median_s'])} | {counted} |")
    payload = {
        "benchmark": name,
        **extra,
        "environment": environment(),
        "rounds": args.rounds,
        "timings": timings,
        "traces": traces,
        "calls": calls,
        "ratios": ratios,
    }
    write(name, args.out, payload, "\n".join([*rows, "", *notes]))


def figure(**kwargs):
    """A matplotlib figure drawn off-screen (Agg), or None without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot", file=sys.stderr)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.figure(**kwargs)


def save_plot(fig, name: str, out: Path) -> Path | None:
    """Saves ``fig`` as ``<out>/<name>-<backend>.png``; returns the path."""
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{stem(name)}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    _record(path)
    print(f"wrote {path}")
    return path
