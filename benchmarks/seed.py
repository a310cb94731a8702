"""The seed case: a nested function jitted on every call of its enclosing function.

    python benchmarks/seed.py [--device gpu] [--rounds N] [--quick]

Compares, per call of ``outer``: ``jax.jit`` of the nested function (recompiles
every call), ``stable_jit`` of the nested function, and a hoisted ``@jax.jit``
function defined once (the best case). A fourth variant wraps the nested
function in a do-nothing Python object that forwards to the hoisted function:
the floor for any wrapper written in Python. Each call is waited for; the
``stable_jit`` and hoisted variants are also timed as a loop of calls waited for
once at its end, where JAX's asynchronous dispatch overlaps a call's Python with
the last call's work. Prints a before/after table and writes
``seed-<backend>.{json,md}`` under ``local-results/benchmarks/`` (``benchmarks/results/`` with ``--save``).
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(__doc__, rounds=15, quick_rounds=5)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from stablejit import stable_jit  # noqa: E402

# One counter per variant: a variant that counted in a dict shared with the
# others would see its global change whenever another variant traces, and
# stable_jit (rightly) retraces when a global it reads changes.
NESTED_TRACES, STABLE_TRACES, HOISTED_TRACES = [], [], []


def outer_jax(a):
    def inner(x):
        NESTED_TRACES.append(1)
        return x * 2

    return jax.jit(inner)(a)


def outer_stable(a):
    def inner(x):
        STABLE_TRACES.append(1)
        return x * 2

    return stable_jit(inner)(a)


@jax.jit
def hoisted(x):
    HOISTED_TRACES.append(1)
    return x * 2


def outer_hoisted(a):
    return hoisted(a)


outer_floor = _harness.python_floor(hoisted)


def _loop(outer, a, n):
    """One round's ``n`` calls, the last one waited for (see the module's docstring)."""
    count = [0]

    def call():
        out = outer(a)
        count[0] += 1
        if count[0] % n == 0:
            out.block_until_ready()

    return call


def main():
    a = jnp.arange(8.0)
    if _harness.data_sharding() is not None:  # --host-devices: split `a` over them
        a = jax.device_put(a, _harness.data_sharding())
    outers = {
        "jax.jit (nested)": outer_jax,
        "stable_jit (nested)": outer_stable,
        "jax.jit (hoisted)": outer_hoisted,
        "no-op Python wrapper (nested)": outer_floor,
    }
    for f in outers.values():  # warm up; also checks results agree
        assert (f(a) == a * 2).all()
    # Each call is synchronised, as a caller using the result would be.
    fast = 2000
    variants = {
        name: (
            (lambda f=f: f(a).block_until_ready()),
            3 if "nested" in name and "jax" in name else fast,
        )
        for name, f in outers.items()
    }
    for name in ("stable_jit (nested)", "jax.jit (hoisted)"):
        variants[f"{name}, loop waited for at its end"] = (_loop(outers[name], a, fast), fast)
    timings = _harness.interleaved(variants, args.rounds)
    calls = {n: 1 + args.rounds * variants[n][1] for n in outers}
    calls["stable_jit (nested)"] += args.rounds * fast  # its loop's calls count the same traces

    traces = {
        "jax.jit (nested)": len(NESTED_TRACES),
        "stable_jit (nested)": len(STABLE_TRACES),
        "jax.jit (hoisted)": len(HOISTED_TRACES),
        "no-op Python wrapper (nested)": len(HOISTED_TRACES),
    }
    t = {n: timings[n]["median_s"] for n in outers}
    stable_over_hoisted = t["stable_jit (nested)"] / t["jax.jit (hoisted)"]
    nested_over_stable = t["jax.jit (nested)"] / t["stable_jit (nested)"]
    floor_over_hoisted = t["no-op Python wrapper (nested)"] / t["jax.jit (hoisted)"]
    loop = ", loop waited for at its end"
    stable_over_hoisted_loop = (
        timings["stable_jit (nested)" + loop]["median_s"]
        / timings["jax.jit (hoisted)" + loop]["median_s"]
    )
    _harness.write_per_call(
        "seed",
        args,
        timings,
        traces,
        calls,
        {
            "stable_over_hoisted": stable_over_hoisted,
            "nested_over_stable": nested_over_stable,
            "floor_over_hoisted": floor_over_hoisted,
            "stable_over_hoisted_loop": stable_over_hoisted_loop,
        },
        [
            f"stable_jit (nested) / jax.jit (hoisted): **{stable_over_hoisted:.2f}×**  ",
            f"jax.jit (nested) / stable_jit (nested): **{nested_over_stable:,.0f}×**  ",
            f"no-op Python wrapper (nested) / jax.jit (hoisted): {floor_over_hoisted:.2f}× "
            "(the floor for any pure-Python wrapper)  ",
            f"the same in a loop waited for at its end: **{stable_over_hoisted_loop:.2f}×**",
        ],
    )


if __name__ == "__main__":
    main()
