"""Memory: fresh closures over fresh arrays, and a bounded cache of many variants.

    python benchmarks/memory.py [--device gpu] [--rounds N] [--quick]

1. 10 000 calls of a nested function closing over a fresh 1 MiB array each call:
   resident memory after warm-up and after the calls (the arrays must not be kept).
2. 600 distinct variants (a changing Python scalar) with ``config.cache_size=100``:
   entries stay at 100 and memory stays bounded.
``--quick`` divides both counts by ten (and the cache size too).
Writes ``memory-<backend>.{json,md}`` under ``local-results/benchmarks/`` (``benchmarks/results/`` with ``--save``). Linux only (reads /proc).
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(__doc__, rounds=1)

import gc  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402

import stablejit  # noqa: E402
from stablejit import stable_jit  # noqa: E402

MIB = 1 << 20
SCALE = 10 if args.quick else 1  # --quick: a tenth of the calls and variants


def rss() -> float:
    """Resident set size now, in MiB."""
    gc.collect()
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MIB


def outer(w, k):
    def inner(x):
        return x * k + w[:4]

    return stable_jit(inner)(np.zeros(4, np.float32)).block_until_ready()


def fresh_arrays(n: int) -> None:
    for i in range(n):
        outer(np.full(MIB // 4, i, np.float32), 1)  # a fresh 1 MiB array


def many_variants(n: int) -> None:
    w = np.ones(4, np.float32)
    for k in range(n):
        outer(w, k + 2)  # a new static value: a new variant


def main():
    calls, variants, size = 10_000 // SCALE, 600 // SCALE, 100 // SCALE
    fresh_arrays(100 // SCALE)
    a0 = rss()
    fresh_arrays(calls)
    a1 = rss()
    entries_a = stablejit.cache_info().entries

    stablejit.config.cache_size = size
    stablejit.config.recompile_limit = 10_000
    many_variants(variants // 3)
    b0 = rss()
    many_variants(variants)
    b1 = rss()
    info = stablejit.cache_info()
    entries_b = info.entries

    rows = [
        "| scenario | RSS before | RSS after | growth | cache entries |",
        "|---|---:|---:|---:|---:|",
        f"| {calls:,} calls, fresh closure over a fresh 1 MiB array each | {a0:.0f} MiB | "
        f"{a1:.0f} MiB | {a1 - a0:+.1f} MiB | {entries_a} |",
        f"| {variants} more distinct variants, cache_size={size} | {b0:.0f} MiB | {b1:.0f} MiB | "
        f"{b1 - b0:+.1f} MiB | {entries_b} (evictions: {info.evictions}) |",
    ]
    _harness.write(
        "memory",
        args.out,
        {
            "benchmark": "memory",
            "environment": _harness.environment(),
            "fresh_arrays": {"rss_before_mib": a0, "rss_after_mib": a1, "entries": entries_a},
            "variants": {
                "rss_before_mib": b0,
                "rss_after_mib": b1,
                "entries": entries_b,
                "evictions": info.evictions,
            },
        },
        "\n".join(rows),
    )


if __name__ == "__main__":
    main()
