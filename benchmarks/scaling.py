"""Fingerprint overhead as the closure grows.

    python benchmarks/scaling.py [--device gpu] [--rounds N] [--leaves 10,100,...] [--quick]

Per call, for N = 10, 100, 1000 and 10 000:

* **arrays**: a closure over a params pytree (nested dicts, N small arrays),
  redefined on every call, under ``stable_jit`` (the params are walked,
  fingerprinted and lifted on every call) against a hoisted ``jax.jit(f)``
  called as ``f(params, x)``: JAX's own dispatch of the same pytree. The goal
  is ``stable_jit / jax.jit ≤ 1.25``. The function reads one leaf, so that
  compiling stays cheap at 10 000 leaves (XLA takes minutes to compile a
  program that reads them all); the others are pruned from both executables
  alike, and what is timed is dispatch: flattening, checking and passing N
  buffers.
* **objects**: a closure over N plain Python objects with a few attributes
  each (like HuggingFace logits processors) and a small nested config dict,
  read at trace time. ``stable_jit`` keys every object by its state on every
  call; the reference is a hoisted ``jax.jit`` of one closure over the same
  objects, which checks nothing (and so goes stale when one changes).

All variants of all sizes run interleaved, round by round. Writes
``scaling-<backend>.{json,md,png}`` under ``local-results/benchmarks/`` (``benchmarks/results/`` with ``--save``) (log-log).
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(
    __doc__,
    rounds=11,
    quick_rounds=5,
    extra={"leaves": "comma-separated sizes N (default 10,100,1000,10000)"},
)

import math  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from stablejit import stable_jit  # noqa: E402

GOAL = 1.25


def make_params(n: int) -> dict:
    """N arrays of shape (2,), ten to a layer: ``{"layer0": {"w0": ..., ...}, ...}``."""
    return {
        f"layer{i // 10}": {f"w{j}": jnp.full((2,), float(i + j)) for j in range(min(10, n - i))}
        for i in range(0, n, 10)
    }


class Processor:
    """A plain object like a HuggingFace logits processor."""

    def __init__(self, i: int):
        self.name = f"processor-{i}"
        self.temperature = 1.0 + (i % 7) / 100
        self.top_k = 50 + i % 3
        self.enabled = i % 5 != 0


CONFIG = {
    "model": {"n_layer": 4, "n_embd": 128, "activation": "gelu"},
    "generation": {"max_length": 32, "eos_token_id": 255, "pad_token_id": 0},
}


def arrays_stable(params):
    def outer(x):
        def inner(x):
            return x + params["layer0"]["w0"][0]

        return stable_jit(inner)(x)

    return outer


@jax.jit
def _arrays_hoisted(params, x):
    return x + params["layer0"]["w0"][0]


def arrays_jax(params):
    return lambda x: _arrays_hoisted(params, x)


def _scale(processors, config):
    s = 1.0
    for p in processors:
        if p.enabled:
            s = s / p.temperature
    return s * config["generation"]["max_length"]


def objects_stable(processors, config):
    def outer(x):
        def inner(x):
            return x * _scale(processors, config)

        return stable_jit(inner)(x)

    return outer


def objects_jax(processors, config):
    def inner(x):
        return x * _scale(processors, config)

    hoisted = jax.jit(inner)  # defined once: keyed by identity, never re-reads the objects
    return hoisted


VARIANTS = {
    "arrays": {
        "stable_jit (closure, redefined)": arrays_stable,
        "jax.jit (params as argument, hoisted)": arrays_jax,
    },
    "objects": {
        "stable_jit (closure, redefined)": objects_stable,
        "jax.jit (closure, hoisted)": objects_jax,
    },
}


WARM_CALLS = 8
"""Calls before timing: a first call compiles, and a redefined closure's
fast-path checks are compiled after a few hits (see the fingerprint's fastpath)."""


def _calls_per_round(fs, x) -> int:
    """Calls per round for variants compared with each other: one count, enough
    for ~20 ms of the slowest (at least 3), measured once all are warm.

    One count for all: a variant given fewer calls per round pays more of its
    round's first call, made with the CPU caches cold from the variants timed
    in between (measured: at N = 1,000, 3 calls a round read 1.55×, 300 read 1.10×).
    """
    per = 0.0
    for f in fs:
        for _ in range(WARM_CALLS):
            f(x).block_until_ready()
        t0 = time.perf_counter()
        for _ in range(3):
            f(x).block_until_ready()
        per = max(per, (time.perf_counter() - t0) / 3)
    return max(3, min(2000, math.ceil(0.02 / per)))


def _ratio(r: float) -> str:
    return f"{r:.2f}" if r < 10 else f"{r:,.0f}"


def _slope(ns, ts) -> float:
    """Least-squares slope of log t against log N (1.0: linear)."""
    lx = [math.log(n) for n in ns]
    ly = [math.log(t) for t in ts]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx
    )


def main():
    ns = [int(v) for v in (args.leaves or "10,100,1000,10000").split(",")]
    x = jnp.arange(8.0)
    variants = {}
    for n in ns:
        params = make_params(n)
        assert len(jax.tree.leaves(params)) == n
        processors = [Processor(i) for i in range(n)]
        made = {("arrays", name): make(params) for name, make in VARIANTS["arrays"].items()} | {
            ("objects", name): make(processors, CONFIG)
            for name, make in VARIANTS["objects"].items()
        }
        for kind in VARIANTS:
            outs = [f(x) for (k, _), f in made.items() if k == kind]
            assert all((o == outs[0]).all() for o in outs), f"{kind} variants disagree at N={n}"
        for kind in VARIANTS:
            fs = {name: f for (k, name), f in made.items() if k == kind}
            calls = _calls_per_round(fs.values(), x)
            for name, f in fs.items():
                variants[f"{kind} | {name} | {n}"] = ((lambda f=f: f(x).block_until_ready()), calls)
    timings = _harness.interleaved(variants, args.rounds)
    t = {
        kind: {name: [timings[f"{kind} | {name} | {n}"]["median_s"] for n in ns] for name in v}
        for kind, v in VARIANTS.items()
    }
    results = {}
    for kind, by_name in t.items():
        (stable_name, stable_t), (ref_name, ref_t) = by_name.items()
        ratios = [s / r for s, r in zip(stable_t, ref_t, strict=True)]
        big = [i for i, n in enumerate(ns) if n >= 100] or list(range(len(ns)))
        results[kind] = {
            "n": ns,
            "per_call_median_s": by_name,
            "ratio": ratios,
            "extra_per_item_s": [(s - r) / n for s, r, n in zip(stable_t, ref_t, ns, strict=True)],
            "loglog_slope_stable": _slope([ns[i] for i in big], [stable_t[i] for i in big])
            if len(big) > 1
            else None,
            "loglog_slope_reference": _slope([ns[i] for i in big], [ref_t[i] for i in big])
            if len(big) > 1
            else None,
        }
    arrays = results["arrays"]
    rows = [
        f"Per call, median of {args.rounds} interleaved rounds. **arrays**: a closure over a "
        "params dict of N arrays, redefined every call, vs `jax.jit(f)(params, x)`. "
        "**objects**: a closure over N plain objects (4 attributes each) and a nested config "
        "dict vs a hoisted `jax.jit` of one closure over them (checks nothing).",
        "",
        "| closure over | N | stable_jit | jax.jit | stable_jit / jax.jit | extra per item |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind, r in results.items():
        (stable_t, ref_t) = r["per_call_median_s"].values()
        for i, n in enumerate(ns):
            goal = " ✓" if kind == "arrays" and r["ratio"][i] <= GOAL else ""
            rows.append(
                f"| {kind} | {n:,} | {_harness.fmt_time(stable_t[i])} | "
                f"{_harness.fmt_time(ref_t[i])} | **{_ratio(r['ratio'][i])}×**{goal} | "
                f"{r['extra_per_item_s'][i] * 1e9:,.0f} ns |"
            )
    rows += [
        "",
        f"arrays: stable_jit / jax.jit at N = {ns[-1]:,}: **{arrays['ratio'][-1]:.2f}×** "
        f"(goal ≤ {GOAL}×)  ",
    ]
    for kind, r in results.items():
        if r["loglog_slope_stable"] is not None:
            rows.append(
                f"{kind}: log-log slope of time against N (N ≥ 100): stable_jit "
                f"{r['loglog_slope_stable']:.2f}, jax.jit {r['loglog_slope_reference']:.2f} "
                "(1 = linear)  "
            )
    rows[-1] = rows[-1].rstrip()
    _harness.write(
        "scaling",
        args.out,
        {
            "benchmark": "scaling",
            "environment": _harness.environment(),
            "rounds": args.rounds,
            "goal_ratio": GOAL,
            "calls_per_round": {k: v[1] for k, v in variants.items()},
            "results": results,
        },
        "\n".join(rows),
    )
    fig = _harness.figure(figsize=(10, 4))
    if fig is not None:
        left, right = fig.subplots(1, 2)
        colours = {"arrays": "tab:green", "objects": "tab:purple"}
        for kind, r in results.items():
            (sn, st), (rn, rt) = r["per_call_median_s"].items()
            left.plot(ns, st, "o-", color=colours[kind], label=f"{kind}: {sn}")
            left.plot(ns, rt, "s--", color=colours[kind], alpha=0.6, label=f"{kind}: {rn}")
        left.set(xscale="log", yscale="log", xlabel="N (arrays or objects in the closure)")
        left.set_ylabel("time per call (s)")
        left.legend(fontsize=7)
        left.grid(True, which="major", alpha=0.3)
        right.plot(ns, arrays["ratio"], "o-", color=colours["arrays"], label="arrays")
        right.axhline(1, color="black", linewidth=0.8)
        right.axhline(GOAL, color="grey", linestyle=":", label=f"goal ({GOAL}×)")
        right.set(xscale="log", xlabel="N (arrays in the closure)")
        right.set_ylim(0, max(2.5, max(arrays["ratio"]) * 1.1))
        right.set_ylabel("stable_jit (closure) / jax.jit (params as argument)")
        right.legend(fontsize=7)
        right.grid(True, which="both", alpha=0.3)
        env = _harness.environment()
        fig.suptitle(f"Fingerprint cost vs closure size: {env['device']}, jax {env['jax']}")
        _harness.save_plot(fig, "scaling", args.out)


if __name__ == "__main__":
    main()
