"""An optax training step whose optimiser is built on every call.

    python benchmarks/optax_step.py [--device gpu] [--rounds N] [--quick]

Needs optax. ``optax.adam(lr)`` is a NamedTuple of closures over closures
(``chain`` of ``scale_by_adam`` and ``scale_by_learning_rate``); code that
builds it inside the function it jits — a training step taking the learning
rate, a notebook cell run again — hands ``jax.jit`` a new function every
call. A fourth variant builds ``optax.adam(lr)``, discards it and calls the
hoisted step: the floor for any nested variant, since each must build it. Per call of ``step`` (an update of a small MLP's parameters),
interleaved in one process: ``jax.jit`` of the nested step (recompiles),
``stable_jit`` of it (one trace), and the hand-hoisted reference, a
``jax.jit`` step over an optimiser built once. Building ``optax.adam`` alone
is timed too: the nested variants pay it, the hoisted one does not.

Two ways of calling: each step waited for (``block_until_ready``), and a
training loop (each step takes the last one's parameters; one wait per
round), where JAX's asynchronous dispatch overlaps a step's Python with the
previous step's compute. On XLA:CPU the first overstates any Python cost:
its worker threads go to sleep while Python runs between waited-for steps,
and waking them costs about as much again (measured: 20 µs of plain Python
before each waited-for step slowed the step itself by 40-70 µs).
Writes ``optax-step-<backend>.{json,md}`` under ``local-results/benchmarks/`` (``benchmarks/results/`` with ``--save``).
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(__doc__, rounds=15, quick_rounds=5)

try:
    import optax
except ImportError:
    raise SystemExit("optax-step: optax is not installed (pip install optax)") from None

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from stablejit import stable_jit  # noqa: E402

# One trace counter per variant (see benchmarks/seed.py).
JAX_TRACES, STABLE_TRACES, HOISTED_TRACES = [], [], []


def loss(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] + params["b2"]) ** 2)


def step_jax(params, state, x, lr):
    opt = optax.adam(lr)

    def train(params, state, x):
        JAX_TRACES.append(1)
        updates, state = opt.update(jax.grad(loss)(params, x), state, params)
        return optax.apply_updates(params, updates), state

    return jax.jit(train)(params, state, x)


def step_stable(params, state, x, lr):
    opt = optax.adam(lr)

    def train(params, state, x):
        STABLE_TRACES.append(1)
        updates, state = opt.update(jax.grad(loss)(params, x), state, params)
        return optax.apply_updates(params, updates), state

    return stable_jit(train)(params, state, x)


HOISTED_OPT = optax.adam(1e-3)


@jax.jit
def train_hoisted(params, state, x):
    HOISTED_TRACES.append(1)
    updates, state = HOISTED_OPT.update(jax.grad(loss)(params, x), state, params)
    return optax.apply_updates(params, updates), state


def step_hoisted(params, state, x, lr):
    return train_hoisted(params, state, x)


def step_floor(params, state, x, lr):
    optax.adam(lr)  # what every nested variant pays before it calls anything
    return train_hoisted(params, state, x)


FLOOR = "jax.jit (hoisted), adam built and unused"
"""What any variant that builds the optimiser per call pays at least (as the
seed's no-op wrapper is for a redefined closure)."""

VARIANTS = {
    "jax.jit (nested)": (step_jax, JAX_TRACES),
    "stable_jit (nested)": (step_stable, STABLE_TRACES),
    "jax.jit (hoisted)": (step_hoisted, HOISTED_TRACES),
}


def main():
    k1, k2 = jax.random.split(jax.random.key(0))
    params = {
        "w1": jax.random.normal(k1, (16, 32)),
        "b1": jnp.zeros(32),
        "w2": jax.random.normal(k2, (32, 4)),
        "b2": jnp.zeros(4),
    }
    state = HOISTED_OPT.init(params)
    x = jnp.ones((8, 16))
    got = {name: f(params, state, x, 1e-3) for name, (f, _) in VARIANTS.items()}
    want = jax.tree.leaves(got["jax.jit (hoisted)"])
    for name, out in got.items():
        for a, b in zip(jax.tree.leaves(out), want, strict=True):
            assert jnp.allclose(a, b, rtol=1e-6), name

    fast = 200 if args.quick else 1000
    slow = {"jax.jit (nested)"}

    def call(f):
        return lambda: jax.block_until_ready(f(params, state, x, 1e-3))

    def loop(f):
        carry, n = [params, state], [0]

        def step():
            carry[:] = f(*carry, x, 1e-3)
            n[0] += 1
            if n[0] % fast == 0:  # the round's last step: wait for them all
                jax.block_until_ready(carry)

        return step

    variants = {name: (call(f), 2 if name in slow else fast) for name, (f, _) in VARIANTS.items()}
    variants[FLOOR] = (call(step_floor), fast)
    for name in ("stable_jit (nested)", "jax.jit (hoisted)"):
        variants[f"{name}, training loop"] = (loop(VARIANTS[name][0]), fast)
    variants[f"{FLOOR}, training loop"] = (loop(step_floor), fast)
    variants["optax.adam(lr) alone"] = (lambda: optax.adam(1e-3), fast)
    timings = _harness.interleaved(variants, args.rounds)
    t = {n: timings[n]["median_s"] for n in variants}
    traces = {n: len(counter) for n, (_, counter) in VARIANTS.items()}
    calls = {n: 1 + args.rounds * variants[n][1] for n in VARIANTS}
    for name in ("stable_jit (nested)", "jax.jit (hoisted)"):
        calls[name] += args.rounds * fast  # its training-loop steps count the same traces
    ratios = {
        "jax_nested_over_stable": t["jax.jit (nested)"] / t["stable_jit (nested)"],
        "stable_over_jax_hoisted": t["stable_jit (nested)"] / t["jax.jit (hoisted)"],
        "stable_over_jax_hoisted_training_loop": (
            t["stable_jit (nested), training loop"] / t["jax.jit (hoisted), training loop"]
        ),
        "floor_over_jax_hoisted": t[FLOOR] / t["jax.jit (hoisted)"],
        "floor_over_jax_hoisted_training_loop": (
            t[f"{FLOOR}, training loop"] / t["jax.jit (hoisted), training loop"]
        ),
        "stable_over_floor": t["stable_jit (nested)"] / t[FLOOR],
        "stable_over_floor_training_loop": (
            t["stable_jit (nested), training loop"] / t[f"{FLOOR}, training loop"]
        ),
        "stable_minus_adam_over_jax_hoisted": (
            (t["stable_jit (nested)"] - t["optax.adam(lr) alone"]) / t["jax.jit (hoisted)"]
        ),
    }
    _harness.write_per_call(
        "optax-step",
        args,
        timings,
        traces,
        calls,
        ratios,
        [
            f"jax.jit (nested) / stable_jit (nested): "
            f"**{ratios['jax_nested_over_stable']:,.0f}×**  ",
            f"stable_jit (nested) / jax.jit (hoisted), each step waited for: "
            f"**{ratios['stable_over_jax_hoisted']:.2f}×**  ",
            f"the same in a training loop: "
            f"**{ratios['stable_over_jax_hoisted_training_loop']:.2f}×**  ",
            "stable_jit (nested) less building adam / jax.jit (hoisted): "
            f"{ratios['stable_minus_adam_over_jax_hoisted']:.2f}×  ",
            f"the floor (hoisted, building adam unused) / jax.jit (hoisted): "
            f"{ratios['floor_over_jax_hoisted']:.2f}× waited, "
            f"{ratios['floor_over_jax_hoisted_training_loop']:.2f}× training loop  ",
            f"stable_jit (nested) / the floor: {ratios['stable_over_floor']:.2f}× waited, "
            f"{ratios['stable_over_floor_training_loop']:.2f}× training loop",
        ],
        intro=f"optax {optax.__version__}; per call of `step` (adam on a 2-layer MLP), "
        f"median of {args.rounds} interleaved rounds.",
        optax=optax.__version__,
    )


if __name__ == "__main__":
    main()
