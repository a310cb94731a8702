"""The seed case call by call: the headline picture.

    python benchmarks/seed_percall.py [--device gpu] [--rounds N] [--calls N] [--quick]

Per-call time against call index, from a cold start, for the seed's nested
function: ``jax.jit`` of the closure re-jitted on every call of ``outer``,
``stable_jit`` of the same redefined closure, a hoisted ``@jax.jit`` defined
once, and (when equinox is installed) ``eqx.filter_jit`` of the redefined
closure. Each round clears JAX's and stablejit's caches, then runs each
variant's calls back to back (a loop calling ``outer``), the variants in an
order that rotates from round to round; each point is the median over rounds. Writes
``seed-percall-<backend>.{json,md,png}`` under ``local-results/benchmarks/`` (``benchmarks/results/`` with ``--save``) (log-scale y).
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(
    __doc__,
    rounds=5,
    quick_rounds=3,
    extra={"calls": "calls per round (default 100; 30 with --quick)"},
)

import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import stablejit  # noqa: E402
from stablejit import stable_jit  # noqa: E402

try:
    import equinox as eqx
except ImportError:  # an optional anchor
    eqx = None


def outer_jax(a):
    def inner(x):
        return x * 2

    return jax.jit(inner)(a)


def outer_stable(a):
    def inner(x):
        return x * 2

    return stable_jit(inner)(a)


def outer_eqx(a):
    def inner(x):
        return x * 2

    return eqx.filter_jit(inner)(a)


def _body(x):
    return x * 2


def make_hoisted():
    hoisted = jax.jit(_body)  # defined once per round, outside the calls

    def outer_hoisted(a):
        return hoisted(a)

    return outer_hoisted


NESTED, STABLE, HOISTED, EQX = (
    "jax.jit (nested)",
    "stable_jit (nested)",
    "jax.jit (hoisted)",
    "eqx.filter_jit (nested)",
)
STYLE = {
    NESTED: dict(color="tab:red"),
    STABLE: dict(color="tab:green"),
    HOISTED: dict(color="tab:blue", linestyle="--"),
    EQX: dict(color="tab:orange", linestyle=":"),
}


def one_round(a, calls: int, r: int) -> dict[str, list[float]]:
    jax.clear_caches()
    stablejit.clear_cache()
    outers = {NESTED: outer_jax, STABLE: outer_stable, HOISTED: make_hoisted()}
    if eqx is not None:
        outers[EQX] = outer_eqx
    names = list(outers)
    times: dict[str, list[float]] = {n: [] for n in names}
    k = r % len(names)
    for name in names[k:] + names[:k]:
        f = outers[name]
        for _ in range(calls):
            t0 = time.perf_counter()
            f(a).block_until_ready()
            times[name].append(time.perf_counter() - t0)
    return times


def main():
    calls = int(args.calls) if args.calls else (30 if args.quick else 100)
    a = jnp.arange(8.0)
    for f in (outer_jax, outer_stable, make_hoisted(), *([outer_eqx] if eqx else [])):
        assert (f(a) == a * 2).all()
    rounds = [one_round(a, calls, r) for r in range(args.rounds)]
    names = list(rounds[0])
    median = {
        n: [statistics.median(rr[n][i] for rr in rounds) for i in range(calls)] for n in names
    }
    first = {n: median[n][0] for n in names}
    # Steady state: every call after the first, all rounds pooled.
    steady = {n: statistics.median(t for rr in rounds for t in rr[n][1:]) for n in names}
    ratios = {
        "nested_over_stable": steady[NESTED] / steady[STABLE],
        "stable_over_hoisted": steady[STABLE] / steady[HOISTED],
        "stable_first_over_hoisted_first": first[STABLE] / first[HOISTED],
    }
    if eqx is not None:
        ratios["eqx_nested_over_stable"] = steady[EQX] / steady[STABLE]
    rows = [
        f"Per call of `outer`, from cold caches; median over {args.rounds} interleaved rounds "
        f"of {calls} calls of each variant.",
        "",
        "| variant | first call | later calls (median) |",
        "|---|---:|---:|",
        *(
            f"| {n} | {_harness.fmt_time(first[n])} | {_harness.fmt_time(steady[n])} |"
            for n in names
        ),
        "",
        f"later calls, jax.jit (nested) / stable_jit (nested): "
        f"**{ratios['nested_over_stable']:,.0f}×**  ",
        f"later calls, stable_jit (nested) / jax.jit (hoisted): "
        f"**{ratios['stable_over_hoisted']:.2f}×**  ",
        f"first call, stable_jit (nested) / jax.jit (hoisted): "
        f"{ratios['stable_first_over_hoisted_first']:.2f}×",
    ]
    if eqx is not None:
        rows[-1] += "  "
        rows.append(
            f"later calls, eqx.filter_jit (nested) / stable_jit (nested): "
            f"{ratios['eqx_nested_over_stable']:,.0f}×"
        )
    _harness.write(
        "seed-percall",
        args.out,
        {
            "benchmark": "seed-percall",
            "environment": _harness.environment(),
            "rounds": args.rounds,
            "calls": calls,
            "first_call_s": first,
            "later_calls_median_s": steady,
            "per_call_median_s": median,
            "ratios": ratios,
        },
        "\n".join(rows),
    )
    fig = _harness.figure(figsize=(7, 4))
    if fig is not None:
        ax = fig.add_subplot()
        x = range(1, calls + 1)
        for n in names:
            ax.plot(x, median[n], label=n, linewidth=1.6, **STYLE[n])
        ax.set_yscale("log")
        ax.set_xlabel("call of outer(x)")
        ax.set_ylabel("time per call (s, log scale)")
        env = _harness.environment()
        ax.set_title(
            f"A closure redefined on every call: {env['device']}, jax {env['jax']}", fontsize=10
        )
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8, loc="center right")
        _harness.save_plot(fig, "seed-percall", args.out)


if __name__ == "__main__":
    main()
