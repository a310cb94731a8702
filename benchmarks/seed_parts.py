"""Where the seed's loop of calls spends its time, piece by piece.

    python benchmarks/seed_parts.py [--device gpu] [--rounds N] [--quick]

The seed case's loop (``benchmarks/seed.py``: calls of ``outer`` waited for at
the end of each batch) split into what a call of ``stable_jit(inner)(a)`` adds
to a hoisted ``jax.jit``: defining ``inner`` (the user's code does that, with
stablejit or not), making the wrapper (``stable_jit(inner)``), and calling it
(the record's checks, the entry lookup, JAX's dispatch). Each variant runs
``n`` calls and waits for the last, interleaved round by round:

- ``jax.jit (hoisted)``: ``hoisted(a)``, the reference;
- ``its jax.jit, called directly``: the stable entry's own ``jax.jit``, as a hit ends;
- ``nested def only``: defines ``inner``, then calls ``hoisted(a)``;
- ``stable_jit, made once``: a ``stable_jit`` wrapper made before the loop, called;
- ``stable_jit (nested)``: the seed's ``outer``, all of it;
- ``no-op Python wrapper``: ``inner`` wrapped in a Python object forwarding to
  ``hoisted`` (the floor for any wrapper written in Python).

Writes ``seed-parts-<backend>.{json,md}`` under ``local-results/benchmarks/`` (``benchmarks/results/`` with ``--save``).
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(__doc__, rounds=15, quick_rounds=3)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from stablejit import stable_jit  # noqa: E402
from stablejit._fingerprint.code import code_info  # noqa: E402

TRACES: list = []  # a side channel, as in seed.py


@jax.jit
def hoisted(x):
    return x * 2


def outer_stable(a):
    def inner(x):
        TRACES.append(1)
        return x * 2

    return stable_jit(inner)(a)


def outer_def(a):
    def inner(x):
        TRACES.append(1)
        return x * 2

    return hoisted(a)


def made(a):
    def inner(x):
        TRACES.append(1)
        return x * 2

    return stable_jit(inner)


outer_floor = _harness.python_floor(hoisted)


def _batch(call, a, n):
    def run():
        for _ in range(n - 1):
            call(a)
        call(a).block_until_ready()

    return run, 1


def main():
    a = jnp.arange(8.0)
    for _ in range(8):  # until each code's record has its call function
        outer_stable(a)
        made(a)(a)
    once = made(a)
    fun = once.__wrapped__
    entry = code_info(fun.__code__).fast.front.entries[once._opts]
    direct = entry.ready
    n = 500 if args.quick else 5000
    calls = {
        "jax.jit (hoisted)": hoisted,
        "its jax.jit, called directly": direct,
        "nested def only": outer_def,
        "stable_jit, made once": once,
        "stable_jit (nested)": outer_stable,
        "no-op Python wrapper": outer_floor,
    }
    for name, call in calls.items():
        assert (call(a) == a * 2).all(), name
    timings = _harness.interleaved({k: _batch(c, a, n) for k, c in calls.items()}, args.rounds)
    base = timings["jax.jit (hoisted)"]["median_s"]
    rows = ["| variant | per call (median) | / jax.jit (hoisted) |", "|---|---:|---:|"]
    ratios = {}
    for name in calls:
        per_call = timings[name]["median_s"] / n
        ratios[name] = timings[name]["median_s"] / base
        rows.append(f"| {name} | {per_call * 1e6:.2f} µs | {ratios[name]:.3f}× |")
    table = (
        f"Calls of each variant in batches of {n}, the last waited for; median of "
        f"{args.rounds} interleaved rounds.\n\n" + "\n".join(rows)
    )
    _harness.write(
        "seed-parts",
        args.out,
        {
            "environment": _harness.environment(),
            "rounds": args.rounds,
            "batch": n,
            "timings": timings,
            "ratios": ratios,
            "traces": len(TRACES),
        },
        table,
    )


if __name__ == "__main__":
    main()
