"""A large array closed over: baked into the program, or lifted to an input.

    python benchmarks/constants.py [--device gpu] [--rounds N] [--mb 1,10,100] [--quick]

First call (trace, lower, compile, run) of a fresh function each time, with
JAX's and stablejit's caches cleared before it, for a closure over a float32
weight matrix of 1, 10 and 100 MB (``--quick``: 1 and 10), computing
``tanh(x @ w)``:

* ``jax.jit`` of the closure: ``w`` is a constant, baked into the program;
* ``stable_jit`` of the closure: ``w`` is lifted to an input;
* ``jax.jit`` with ``w`` passed as an argument: the hand-written reference.

Also the second call (the compiled program, run again). Variants interleaved
round by round; medians. Writes ``constants-<backend>.{json,md,png}`` under ``local-results/benchmarks/`` (``benchmarks/results/`` with ``--save``).
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(
    __doc__,
    rounds=5,
    quick_rounds=3,
    extra={"mb": "comma-separated sizes in MB (default 1,10,100; 1,10 with --quick)"},
)

import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import stablejit  # noqa: E402
from stablejit import stable_jit  # noqa: E402

COLS = 256


def baked(w, x):
    def f(x):
        return jnp.tanh(x @ w)

    jitted = jax.jit(f)
    return lambda: jitted(x)


def lifted(w, x):
    def f(x):
        return jnp.tanh(x @ w)

    return lambda: stable_jit(f)(x)


def argument(w, x):
    def f(w, x):
        return jnp.tanh(x @ w)

    jitted = jax.jit(f)
    return lambda: jitted(w, x)


VARIANTS = {
    "jax.jit, closed over (baked constant)": baked,
    "stable_jit, closed over (lifted)": lifted,
    "jax.jit, array as an argument": argument,
}


def first_two_calls(make, w, x) -> tuple[float, float, jax.Array]:
    jax.clear_caches()
    stablejit.clear_cache()
    call = make(w, x)  # a fresh function
    t0 = time.perf_counter()
    out = call().block_until_ready()
    t1 = time.perf_counter()
    call().block_until_ready()
    return t1 - t0, time.perf_counter() - t1, out


def main():
    sizes = [int(v) for v in (args.mb or ("1,10" if args.quick else "1,10,100")).split(",")]
    data = {}
    for mb in sizes:
        rows = mb * (1 << 20) // 4 // COLS
        w = jax.random.normal(jax.random.key(mb), (rows, COLS), jnp.float32)
        x = jax.random.normal(jax.random.key(0), (1, rows), jnp.float32) / rows**0.5
        data[mb] = (w, x)
    names = list(VARIANTS)
    first = {(mb, n): [] for mb in sizes for n in names}
    second = {(mb, n): [] for mb in sizes for n in names}
    for r in range(args.rounds):
        for mb in sizes:
            w, x = data[mb]
            outs = []
            for n in names[r % len(names) :] + names[: r % len(names)]:
                a, b, out = first_two_calls(VARIANTS[n], w, x)
                first[mb, n].append(a)
                second[mb, n].append(b)
                outs.append(out)
            assert all(jnp.allclose(o, outs[0], atol=1e-5) for o in outs), "variants disagree"
    med1 = {k: statistics.median(v) for k, v in first.items()}
    med2 = {k: statistics.median(v) for k, v in second.items()}
    baked_n, lifted_n, arg_n = names
    ratios = {
        mb: {
            "baked_over_lifted": med1[mb, baked_n] / med1[mb, lifted_n],
            "lifted_over_argument": med1[mb, lifted_n] / med1[mb, arg_n],
        }
        for mb in sizes
    }
    table = [
        f"First call of a fresh function, caches cleared (trace + compile + run), median of "
        f"{args.rounds} interleaved rounds; `tanh(x @ w)` with `w` a float32 (rows, {COLS}) "
        "array. Second call in brackets.",
        "",
        "| w | " + " | ".join(names) + " | baked / lifted | lifted / argument |",
        "|---:|" + "---:|" * (len(names) + 2),
    ]
    for mb in sizes:
        cells = [
            f"{_harness.fmt_time(med1[mb, n])} ({_harness.fmt_time(med2[mb, n])})" for n in names
        ]
        table.append(
            f"| {mb} MB | "
            + " | ".join(cells)
            + f" | **{ratios[mb]['baked_over_lifted']:.2f}×** | "
            f"{ratios[mb]['lifted_over_argument']:.2f}× |"
        )
    _harness.write(
        "constants",
        args.out,
        {
            "benchmark": "constants",
            "environment": _harness.environment(),
            "rounds": args.rounds,
            "sizes_mb": sizes,
            "first_call_median_s": {f"{mb} MB | {n}": med1[mb, n] for mb in sizes for n in names},
            "second_call_median_s": {f"{mb} MB | {n}": med2[mb, n] for mb in sizes for n in names},
            "ratios": {f"{mb} MB": v for mb, v in ratios.items()},
        },
        "\n".join(table),
    )
    fig = _harness.figure(figsize=(6, 4))
    if fig is not None:
        ax = fig.add_subplot()
        styles = {baked_n: "o-", lifted_n: "s-", arg_n: "^--"}
        colours = {baked_n: "tab:red", lifted_n: "tab:green", arg_n: "tab:blue"}
        for n in names:
            ax.plot(sizes, [med1[mb, n] for mb in sizes], styles[n], color=colours[n], label=n)
        ax.set(xscale="log", yscale="log", xlabel="closed-over array (MB, float32)")
        ax.set_ylabel("first call (s): trace + compile + run")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
        env = _harness.environment()
        ax.set_title(
            f"Compile time vs constant size: {env['device']}, jax {env['jax']}", fontsize=10
        )
        _harness.save_plot(fig, "constants", args.out)


if __name__ == "__main__":
    main()
