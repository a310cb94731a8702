"""Shared benchmark plumbing: interleaved timing rounds, device choice, result files."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(description: str, **defaults) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    p.add_argument("--rounds", type=int, default=defaults.get("rounds", 15))
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument(
        "--host-devices", type=int, default=0, help="split the CPU into N devices (XLA_FLAGS)"
    )
    for name, help_text in defaults.get("extra", {}).items():
        p.add_argument(f"--{name}", default=None, help=help_text)
    args = p.parse_args()
    # Must happen before jax is imported anywhere.
    os.environ["JAX_PLATFORMS"] = "cuda" if args.device == "gpu" else "cpu"
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


def environment() -> dict:
    import jax

    return {
        "python": sys.version.split()[0],
        "jax": jax.__version__,
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


def write(name: str, out: Path, payload: dict, table: str) -> None:
    """Writes ``<name>.json`` and ``<name>.md`` (the table plus environment)."""
    out.mkdir(parents=True, exist_ok=True)
    backend = payload["environment"]["backend"]
    devices = payload["environment"]["devices"]
    stem = f"{name}-{backend}" + (f"-{devices}dev" if devices > 1 else "")
    (out / f"{stem}.json").write_text(json.dumps(payload, indent=2) + "\n")
    env = ", ".join(f"{k} {v}" for k, v in payload["environment"].items())
    (out / f"{stem}.md").write_text(f"# {name} ({backend})\n\n{table}\n\n_{env}_\n")
    print(table)
    print(f"\nwrote {out / stem}.json and .md")
