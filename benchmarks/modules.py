"""Models in closures: per call against the number of layers, nnx, equinox and split/merge.

    python benchmarks/modules.py [--device gpu] [--rounds N] [--layers 8,16,...] [--quick]

Needs flax and equinox. For L = 8, 16, 32, 64 and 128 layers (``--quick``: 8 and 32), an MLP
of L small Linear layers (width 16) in flax nnx and in equinox, called on a (4, 16) batch. Per
call, each call waited for, interleaved round by round (issue 34):

* **nnx**: ``stable_jit(lambda x: model(x))(x)`` with the lambda redefined on every call (a
  closure over the model built per call, the seed case); the hand refactoring, a hoisted
  ``jax.jit`` of ``f(state, x)`` that calls ``nnx.merge(graphdef, state)`` inside, the state
  passed in; and the peer, a hoisted ``nnx.jit(lambda m, x: m(x))(model, x)``.
* **eqx**: ``stable_jit(lambda x: jax.vmap(model)(x))(x)`` redefined on every call; the hand
  refactoring, ``eqx.partition`` once and a hoisted ``jax.jit`` of ``f(params, x)`` that calls
  ``eqx.combine(params, static)`` inside; and the peer, a hoisted
  ``eqx.filter_jit(lambda m, x: jax.vmap(m)(x))(model, x)``.
* **split/merge**: ``stable_jit(lambda s, x: nnx.merge(graphdef, s)(x))(state, x)`` redefined
  on every call, against the same function under a hoisted ``jax.jit`` (graphdef closed over).

Every variant's result is checked against the eager model once. The ratios are each variant
over its family's hand refactoring (the goal for stable_jit: at most 1.25×). Writes
``modules-<backend>.{json,md,png}`` under ``local-results/benchmarks/``
(``benchmarks/results/`` with ``--save``); the plot is per call against layers, log scale.
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(
    __doc__,
    rounds=11,
    quick_rounds=5,
    extra={"layers": "comma-separated layer counts L (default 8,16,32,64,128; quick 8,32)"},
)

try:
    import equinox as eqx
    from flax import nnx
except ImportError:
    raise SystemExit("modules: needs flax and equinox (pip install flax equinox)") from None

import math  # noqa: E402
import time  # noqa: E402

import flax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from stablejit import stable_jit  # noqa: E402

GOAL = 1.25
WIDTH = 16
BATCH = 4

# One trace counter per variant (see benchmarks/seed.py): a global list the traced function
# appends to, a side channel stable_jit's fast path allows.
NNX_STABLE, NNX_HAND, NNX_PEER = [], [], []
EQX_STABLE, EQX_HAND, EQX_PEER = [], [], []
SM_STABLE, SM_HAND = [], []


class NnxMLP(nnx.Module):
    def __init__(self, layers: int, rngs: nnx.Rngs):
        self.layers = nnx.List([nnx.Linear(WIDTH, WIDTH, rngs=rngs) for _ in range(layers)])

    def __call__(self, x):
        for layer in self.layers:
            x = jnp.tanh(layer(x))
        return x


class EqxMLP(eqx.Module):
    layers: tuple

    def __init__(self, layers: int, key):
        keys = jax.random.split(key, layers)
        self.layers = tuple(eqx.nn.Linear(WIDTH, WIDTH, key=k) for k in keys)

    def __call__(self, x):
        for layer in self.layers:
            x = jnp.tanh(layer(x))
        return x


# The variants: each ``make(...)`` returns a function of ``x``, a call as a user's code makes it.


def nnx_stable(model):
    def call(x):
        def f(x):
            NNX_STABLE.append(1)
            return model(x)

        return stable_jit(f)(x)  # a closure over the model, built per call

    return call


def nnx_hand(model):
    graphdef, state = nnx.split(model)

    @jax.jit
    def f(state, x):
        NNX_HAND.append(1)
        return nnx.merge(graphdef, state)(x)

    return lambda x: f(state, x)


def nnx_peer(model):
    @nnx.jit
    def f(m, x):
        NNX_PEER.append(1)
        return m(x)

    return lambda x: f(model, x)


def eqx_stable(model):
    def call(x):
        def f(x):
            EQX_STABLE.append(1)
            return jax.vmap(model)(x)

        return stable_jit(f)(x)

    return call


def eqx_hand(model):
    params, static = eqx.partition(model, eqx.is_array)

    @jax.jit
    def f(params, x):
        EQX_HAND.append(1)
        return jax.vmap(eqx.combine(params, static))(x)

    return lambda x: f(params, x)


def eqx_peer(model):
    @eqx.filter_jit
    def f(m, x):
        EQX_PEER.append(1)
        return jax.vmap(m)(x)

    return lambda x: f(model, x)


def sm_stable(model):
    graphdef, state = nnx.split(model)

    def call(x):
        def f(s, x):
            SM_STABLE.append(1)
            return nnx.merge(graphdef, s)(x)

        return stable_jit(f)(state, x)

    return call


def sm_hand(model):
    graphdef, state = nnx.split(model)

    @jax.jit
    def f(s, x):
        SM_HAND.append(1)
        return nnx.merge(graphdef, s)(x)

    return lambda x: f(state, x)


STABLE, HAND, PEER = "stable_jit (closure, redefined)", "hand refactoring", "peer (hoisted)"
FAMILIES = {
    "nnx": {
        "model": "nnx",
        "variants": {
            STABLE: (nnx_stable, NNX_STABLE, "stable_jit(lambda x: model(x))"),
            HAND: (nnx_hand, NNX_HAND, "jax.jit(f)(state, x), nnx.merge inside"),
            PEER: (nnx_peer, NNX_PEER, "nnx.jit(lambda m, x: m(x))(model, x)"),
        },
    },
    "eqx": {
        "model": "eqx",
        "variants": {
            STABLE: (eqx_stable, EQX_STABLE, "stable_jit(lambda x: jax.vmap(model)(x))"),
            HAND: (eqx_hand, EQX_HAND, "jax.jit(f)(params, x), eqx.combine inside"),
            PEER: (eqx_peer, EQX_PEER, "eqx.filter_jit(lambda m, x: jax.vmap(m)(x))(model, x)"),
        },
    },
    "split/merge": {
        "model": "nnx",
        "variants": {
            STABLE: (sm_stable, SM_STABLE, "stable_jit(lambda s, x: nnx.merge(gd, s)(x))(s, x)"),
            HAND: (sm_hand, SM_HAND, "the same lambda under a hoisted jax.jit"),
        },
    },
}

WARM_CALLS = 8
"""Calls before timing: a first call compiles, and a redefined closure's fast-path checks
are compiled after a few hits (see benchmarks/scaling.py)."""


def _calls_per_round(fs, x) -> int:
    """One count for a family's variants (see benchmarks/scaling.py): enough for ~50 ms of
    the slowest, at least 3, measured once all are warm."""
    per = 0.0
    for f in fs:
        for _ in range(WARM_CALLS):
            f(x).block_until_ready()
        t0 = time.perf_counter()
        for _ in range(3):
            f(x).block_until_ready()
        per = max(per, (time.perf_counter() - t0) / 3)
    return max(3, min(1000, math.ceil(0.05 / per)))


def _ratio(r: float) -> str:
    return f"{r:.2f}" if r < 10 else f"{r:,.1f}"


def main():
    default = "8,32" if args.quick else "8,16,32,64,128"
    ls = [int(v) for v in (args.layers or default).split(",")]
    x = jax.random.normal(jax.random.key(1), (BATCH, WIDTH))
    variants, made_calls = {}, {}
    for n in ls:
        models = {
            "nnx": NnxMLP(n, nnx.Rngs(0)),
            "eqx": EqxMLP(n, jax.random.key(0)),
        }
        eager = {
            "nnx": np.asarray(models["nnx"](x)),
            "eqx": np.asarray(jax.vmap(models["eqx"])(x)),
        }
        for family, spec in FAMILIES.items():
            model = models[spec["model"]]
            fs = {name: make(model) for name, (make, _, _) in spec["variants"].items()}
            for name, f in fs.items():  # the first call compiles; checked against eager
                np.testing.assert_allclose(
                    np.asarray(f(x)), eager[spec["model"]], rtol=1e-5, atol=1e-6,
                    err_msg=f"{family} | {name} | {n} layers",
                )  # fmt: skip
            calls = _calls_per_round(fs.values(), x)
            for name, f in fs.items():
                key = f"{family} | {name} | {n}"
                variants[key] = ((lambda f=f: f(x).block_until_ready()), calls)
                made_calls[key] = 1 + WARM_CALLS + 3 + args.rounds * calls
    timings = _harness.interleaved(variants, args.rounds)

    results, ratios = {}, {}
    for family, spec in FAMILIES.items():
        per = {
            name: [timings[f"{family} | {name} | {n}"]["median_s"] for n in ls]
            for name in spec["variants"]
        }
        over = {
            name: [t / h for t, h in zip(per[name], per[HAND], strict=True)]
            for name in spec["variants"]
            if name != HAND
        }
        results[family] = {
            "layers": ls,
            "code": {name: v[2] for name, v in spec["variants"].items()},
            "per_call_median_s": per,
            "over_hand": over,
            # Traces over the whole run, one expected per layer count (per variant).
            "traces": {name: len(v[1]) for name, v in spec["variants"].items()},
            "calls": {
                name: sum(made_calls[f"{family} | {name} | {n}"] for n in ls)
                for name in spec["variants"]
            },
        }
        for name, rs in over.items():
            what = "stable_over_hand" if name == STABLE else "peer_over_hand"
            for n, r in zip(ls, rs, strict=True):
                ratios[f"{family}_{n}_layers_{what}".replace("/", "_")] = r

    rows = [
        f"An MLP of L Linear layers (width {WIDTH}, batch {BATCH}); per call, each waited for, "
        f"median of {args.rounds} interleaved rounds. Ratios: over the family's hand "
        f"refactoring (state or params as arguments to a hoisted `jax.jit`); goal for "
        f"stable_jit ≤ {GOAL}×.",
        "",
        "| family | L | stable_jit (closure) | hand refactoring | peer | "
        "stable_jit / hand | peer / hand |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for family, r in results.items():
        per, over = r["per_call_median_s"], r["over_hand"]
        for i, n in enumerate(ls):
            peer = _harness.fmt_time(per[PEER][i]) if PEER in per else ""
            peer_r = f"{_ratio(over[PEER][i])}×" if PEER in over else ""
            goal = " ✓" if over[STABLE][i] <= GOAL else ""
            rows.append(
                f"| {family} | {n} | {_harness.fmt_time(per[STABLE][i])} | "
                f"{_harness.fmt_time(per[HAND][i])} | {peer} | "
                f"**{_ratio(over[STABLE][i])}×**{goal} | {peer_r} |"
            )
    rows += ["", "| family | variant | code | traces / calls |", "|---|---|---|---:|"]
    for family, r in results.items():
        for name, code in r["code"].items():
            rows.append(
                f"| {family} | {name} | `{code}` | {r['traces'][name]} / {r['calls'][name]:,} |"
            )
    _harness.write(
        "modules",
        args.out,
        {
            "benchmark": "modules",
            "flax": flax.__version__,
            "equinox": eqx.__version__,
            "environment": _harness.environment(),
            "rounds": args.rounds,
            "width": WIDTH,
            "batch": BATCH,
            "goal_ratio": GOAL,
            "calls_per_round": {k: v[1] for k, v in variants.items()},
            "results": results,
            "ratios": ratios,
        },
        "\n".join(rows),
    )
    _plot(ls, results)


def _plot(ls, results) -> None:
    fig = _harness.figure(figsize=(11, 4.2))
    if fig is None:
        return
    left, right = fig.subplots(1, 2)
    colours = {"nnx": "tab:blue", "eqx": "tab:orange", "split/merge": "tab:green"}
    styles = {STABLE: "o-", HAND: "s--", PEER: "^:"}
    for family, r in results.items():
        for name, ts in r["per_call_median_s"].items():
            left.plot(
                ls,
                ts,
                styles[name],
                color=colours[family],
                alpha=1.0 if name == STABLE else 0.7,
                label=f"{family}: {r['code'][name]}",
            )
        right.plot(ls, r["over_hand"][STABLE], "o-", color=colours[family], label=family)
    left.set(xscale="log", yscale="log", xlabel="layers (L)", ylabel="time per call (s)")
    left.set_xticks(ls, [str(n) for n in ls])
    left.minorticks_off()
    left.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    left.grid(True, which="major", alpha=0.3)
    right.axhline(1, color="black", linewidth=0.8)
    right.axhline(GOAL, color="grey", linestyle=":", label=f"goal ({GOAL}×)")
    right.set(xscale="log", yscale="log", xlabel="layers (L)")
    right.set_xticks(ls, [str(n) for n in ls])
    right.minorticks_off()
    right.set_ylabel("stable_jit (closure) / hand refactoring")
    right.legend(fontsize=7)
    right.grid(True, which="both", alpha=0.3)
    env = _harness.environment()
    fig.suptitle(f"Models in closures, per call against layers: {env['device']}, jax {env['jax']}")
    _harness.save_plot(fig, "modules", args.out)


if __name__ == "__main__":
    main()
