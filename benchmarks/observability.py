"""Cost of observability on the hit path.

    python benchmarks/observability.py [--device gpu] [--rounds N] [--baseline REV]

Times, interleaved in one process, the redefined-closure hit path of the seed
case with: this checkout's stablejit with explanations off (the default) and
on, and stablejit as of ``REV`` (default: the commit before the counters and
explanations were added), imported side by side from ``git archive``. Writes
``observability-<backend>.{json,md}`` under ``local-results/benchmarks/`` (``benchmarks/results/`` with ``--save``).
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(
    __doc__, rounds=21, quick_rounds=5, extra={"baseline": "git revision to compare with"}
)

import subprocess  # noqa: E402

import jax.numpy as jnp  # noqa: E402

import stablejit  # noqa: E402

N = 2000  # hits per timed call


def _baseline_rev() -> str:
    # The counters were added as stablejit/_stats.py (now _diagnostics/stats.py): git finds
    # that commit by the path the file had then.
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "stablejit/_stats.py"],
        cwd=_harness.ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if not added:
        raise SystemExit("cannot find the commit that added stablejit/_stats.py; pass --baseline")
    return added[-1] + "~1"


def main():
    rev = args.baseline or _baseline_rev()
    a = jnp.arange(8.0)
    current = _harness.nested_outer(stablejit.stable_jit)
    before = _harness.nested_outer(_harness.import_copy(rev, "stablejit_baseline").stable_jit)
    # An A/A control: HEAD imported the same way as the baseline, so that the
    # bias of importing a second copy shows up in the same run.
    control = _harness.nested_outer(_harness.import_copy("HEAD", "stablejit_head").stable_jit)

    def batch(outer, explain: bool):
        return _harness.hit_batch(outer, a, N, stablejit.config, explain)

    for f in (current, before, control):
        assert (f(a) == a * 2).all()
    variants = {
        "stablejit @ " + rev: batch(before, False),
        "stablejit @ HEAD, imported like the baseline": batch(control, False),
        "this checkout, explain off": batch(current, False),
        "this checkout, explain on": batch(current, True),
    }
    timings = _harness.interleaved(variants, args.rounds)
    t = {n: timings[n]["median_s"] / N for n in variants}
    base, head, off, on = t.values()
    rows = [
        "| variant | per call (median) |",
        "|---|---:|",
        *(f"| {n} | {_harness.fmt_time(v)} |" for n, v in t.items()),
        "",
        f"explain off / before counters: **{off / base:.3f}×**  ",
        f"A/A control, HEAD copy / before counters: {head / base:.3f}× (noise and import bias)  ",
        f"explain on / explain off (hit path): **{on / off:.3f}×**",
    ]
    _harness.write(
        "observability",
        args.out,
        {
            "benchmark": "observability",
            "environment": _harness.environment(),
            "baseline": rev,
            "rounds": args.rounds,
            "per_call_median_s": t,
            "hits_per_round": N,
            "ratios": {
                "off_over_baseline": off / base,
                "head_copy_over_baseline": head / base,
                "on_over_off": on / off,
            },
        },
        "\n".join(rows),
    )


if __name__ == "__main__":
    main()
