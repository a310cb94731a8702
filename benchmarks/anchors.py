"""Anchors: the seed case next to equinox's ``filter_jit``.

    python benchmarks/anchors.py [--device gpu] [--rounds N] [--quick]

Needs equinox. Per call of ``outer``, interleaved in one process, as in
benchmarks/seed.py: ``jax.jit`` of the nested function, ``stable_jit`` of it,
``eqx.filter_jit`` of it (a fresh closure each call), and the hoisted
references, ``eqx.filter_jit`` and ``jax.jit`` of a function defined once.
Writes ``anchors-<backend>.{json,md}`` under ``local-results/benchmarks/`` (``benchmarks/results/`` with ``--save``).
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(__doc__, rounds=15, quick_rounds=5)

try:
    import equinox as eqx
except ImportError:
    raise SystemExit("anchors: equinox is not installed (pip install equinox)") from None

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from stablejit import stable_jit  # noqa: E402

# One trace counter per variant (see benchmarks/seed.py): stable_jit keys the
# globals a function reads, so its counter must not change when others trace.
JAX_TRACES, STABLE_TRACES, EQX_TRACES, EQX_HOISTED_TRACES, JAX_HOISTED_TRACES = [], [], [], [], []


def outer_jax(a):
    def inner(x):
        JAX_TRACES.append(1)
        return x * 2

    return jax.jit(inner)(a)


def outer_stable(a):
    def inner(x):
        STABLE_TRACES.append(1)
        return x * 2

    return stable_jit(inner)(a)


def outer_eqx(a):
    def inner(x):
        EQX_TRACES.append(1)
        return x * 2

    return eqx.filter_jit(inner)(a)


@eqx.filter_jit
def eqx_hoisted(x):
    EQX_HOISTED_TRACES.append(1)
    return x * 2


@jax.jit
def jax_hoisted(x):
    JAX_HOISTED_TRACES.append(1)
    return x * 2


VARIANTS = {
    "jax.jit (nested)": (outer_jax, JAX_TRACES),
    "stable_jit (nested)": (outer_stable, STABLE_TRACES),
    "eqx.filter_jit (nested)": (outer_eqx, EQX_TRACES),
    "eqx.filter_jit (hoisted)": (eqx_hoisted, EQX_HOISTED_TRACES),
    "jax.jit (hoisted)": (jax_hoisted, JAX_HOISTED_TRACES),
}


def main():
    a = jnp.arange(8.0)
    for f, _ in VARIANTS.values():
        assert (f(a) == a * 2).all()
    fast = 2000
    slow = {"jax.jit (nested)", "eqx.filter_jit (nested)"}
    variants = {
        name: ((lambda f=f: f(a).block_until_ready()), 3 if name in slow else fast)
        for name, (f, _) in VARIANTS.items()
    }
    timings = _harness.interleaved(variants, args.rounds)
    t = {n: timings[n]["median_s"] for n in VARIANTS}
    traces = {n: len(counter) for n, (_, counter) in VARIANTS.items()}
    calls = {n: 1 + args.rounds * variants[n][1] for n in VARIANTS}
    ratios = {
        "eqx_nested_over_stable": t["eqx.filter_jit (nested)"] / t["stable_jit (nested)"],
        "jax_nested_over_stable": t["jax.jit (nested)"] / t["stable_jit (nested)"],
        "stable_over_jax_hoisted": t["stable_jit (nested)"] / t["jax.jit (hoisted)"],
        "eqx_hoisted_over_jax_hoisted": t["eqx.filter_jit (hoisted)"] / t["jax.jit (hoisted)"],
    }
    _harness.write_per_call(
        "anchors",
        args,
        timings,
        traces,
        calls,
        ratios,
        [
            f"eqx.filter_jit (nested) / stable_jit (nested): "
            f"**{ratios['eqx_nested_over_stable']:,.0f}×**  ",
            f"jax.jit (nested) / stable_jit (nested): "
            f"**{ratios['jax_nested_over_stable']:,.0f}×**  ",
            f"stable_jit (nested) / jax.jit (hoisted): "
            f"**{ratios['stable_over_jax_hoisted']:.2f}×**  ",
            f"eqx.filter_jit (hoisted) / jax.jit (hoisted): "
            f"{ratios['eqx_hoisted_over_jax_hoisted']:.2f}×",
        ],
        intro=f"equinox {eqx.__version__}; per call of `outer`, median of {args.rounds} "
        "interleaved rounds.",
        equinox=eqx.__version__,
    )


if __name__ == "__main__":
    main()
