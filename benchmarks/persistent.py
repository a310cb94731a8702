"""First call in a fresh process: stablejit's persistent mode vs JAX's
persistent compilation cache vs nothing.

    python benchmarks/persistent.py [--device gpu] [--rounds N] [--size tiny|4-layer|gpt2-small]

Each measurement is a new Python process that builds its inputs, then times
its first call (the seed's nested ``jit`` of a closure, and the greedy
decoder of benchmarks/greedy.py): cold (nothing cached), with JAX's persistent
compilation cache warm (it still traces and lowers, then fetches the
executable), and with ``stablejit.config.persistent_dir`` warm (no trace, no
lowering, no compile). Variants run interleaved, round by round; medians.
The decoders are also timed at their while loop alone: they run eager
operations first, the same work in every variant. Where transformers is
installed (the ``hf`` extra), its Flax GPT-2 ``generate()`` (a tiny random
model, under ``stablejit.patch()``) is measured too: ``hf`` rows.

Writes ``persistent-<size>-<backend>.{json,md}`` under ``local-results/benchmarks/`` (``benchmarks/results/`` with ``--save``).
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(
    __doc__,
    rounds=5,
    quick_rounds=1,
    extra={"size": "greedy decoder: tiny, 4-layer (default; tiny with --quick) or gpt2-small"},
)

import importlib.metadata  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

CHILD = Path(__file__).resolve().parent / "_first_call.py"
VARIANTS = {
    "none": "nothing cached",
    "jax-cache": "JAX persistent compilation cache (warm)",
    "stablejit": "stablejit persistent_dir (warm)",
}


def first_call(case: str, variant: str, directory: str, size: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(CHILD), case, variant, directory, size],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    size = args.size or ("tiny" if args.quick else "4-layer")
    results = {}
    start = time.perf_counter()
    # transformers' own generate() where the hf extra is installed (Flax
    # generation went with transformers 5).
    hf = importlib.util.find_spec("transformers") is not None
    hf = hf and int(importlib.metadata.version("transformers").split(".")[0]) < 5
    for case in ("seed", "greedy", "hf") if hf else ("seed", "greedy"):
        dirs = {v: tempfile.mkdtemp(prefix=f"sj-{v}-") for v in VARIANTS}
        for v in ("jax-cache", "stablejit"):  # populate the caches
            first_call(case, v, dirs[v], size)
        samples = {v: [] for v in VARIANTS}
        names = list(VARIANTS)
        for r in range(args.rounds):
            for v in names[r % 3 :] + names[: r % 3]:
                cold = tempfile.mkdtemp() if v == "none" else dirs[v]
                samples[v].append(first_call(case, v, cold, size))
                print(f"{case} round {r} {v}: {samples[v][-1]}", file=sys.stderr)
        checksums = {s["checksum"] for v in names for s in samples[v]}
        assert len(checksums) == 1, f"variants disagree: {checksums}"
        results[case] = {
            v: {
                "median_s": statistics.median(s["first_call_s"] for s in samples[v]),
                "traces": [s["traces"] for s in samples[v]],
            }
            for v in names
        }
        if case != "seed":
            results[f"{case}: the while loop alone"] = {
                v: {
                    "median_s": statistics.median(s["loop_first_call_s"] for s in samples[v]),
                    "traces": [s["traces"] for s in samples[v]],
                }
                for v in names
            }
    rows = [
        f"First call in a fresh process (greedy decoder: {size}), median of {args.rounds} "
        "interleaved rounds, each a new process.",
        "",
        "| case | " + " | ".join(VARIANTS.values()) + " | stablejit / JAX cache |",
        "|---|" + "---:|" * (len(VARIANTS) + 1),
    ]
    for case, r in results.items():
        cells = [
            f"{_harness.fmt_time(r[v]['median_s'])} ({max(r[v]['traces'])} traces)"
            for v in VARIANTS
        ]
        ratio = r["stablejit"]["median_s"] / r["jax-cache"]["median_s"]
        r["stablejit_over_jax_cache"] = ratio
        rows.append(f"| {case} | " + " | ".join(cells) + f" | **{ratio:.3f}×** |")
    import jax

    _harness.write(
        f"persistent-{size}",
        args.out,
        {
            "benchmark": "persistent",
            "size": size,
            "environment": _harness.environment(),
            "rounds": args.rounds,
            "results": results,
            "wall_s": time.perf_counter() - start,
            "jax_platforms": jax.default_backend(),
        },
        "\n".join(rows),
    )


if __name__ == "__main__":
    main()
