"""Greedy decoding shaped like HuggingFace's Flax ``greedy_search``.

    python benchmarks/greedy.py [--device gpu] [--rounds N] [--size tiny|4-layer|gpt2-small]
                                [--quick]

A self-contained pure-JAX decoder (embeddings, N attention + MLP layers, a
params pytree named like HF's GPT-2) and the greedy loop as HF writes it:
``greedy_search_cond_fn`` / ``greedy_search_body_fn`` closures over the model,
its params, a logits processor and a few ints, redefined on every call and
handed to an eager ``lax.while_loop``. Per call, interleaved:

* eager ``lax.while_loop`` with fresh closures (recompiles every call);
* the same with JAX's persistent compilation cache on;
* ``stablejit.while_loop`` with the same fresh closures;
* a hand-refactored hoisted ``jax.jit`` (params as arguments, ints static): the ceiling.

Writes ``greedy-<size>-<backend>.{json,md}`` under ``local-results/benchmarks/`` (``benchmarks/results/`` with ``--save``).
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(
    __doc__,
    rounds=5,
    quick_rounds=2,
    extra={"size": "tiny, 4-layer (default; tiny with --quick) or gpt2-small"},
)

import functools  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax._src import compilation_cache  # noqa: E402

import stablejit  # noqa: E402

SIZES = {
    "tiny": dict(layers=1, d=32, heads=2, vocab=64, prompt=4, max_length=12),
    "4-layer": dict(layers=4, d=128, heads=4, vocab=512, prompt=8, max_length=32),
    "gpt2-small": dict(layers=12, d=768, heads=12, vocab=50257, prompt=16, max_length=64),
}


def init_params(key, layers, d, vocab, max_length, **_):
    keys = iter(jax.random.split(key, 4 + 4 * layers))

    def dense(n_in, n_out):
        return {
            "kernel": jax.random.normal(next(keys), (n_in, n_out)) * 0.02,
            "bias": jnp.zeros(n_out),
        }

    def norm():
        return {"scale": jnp.ones(d), "bias": jnp.zeros(d)}

    return {
        "wte": {"embedding": jax.random.normal(next(keys), (vocab, d)) * 0.02},
        "wpe": {"embedding": jax.random.normal(next(keys), (max_length, d)) * 0.01},
        "h": {
            str(i): {
                "ln_1": norm(),
                "attn": {"c_attn": dense(d, 3 * d), "c_proj": dense(d, d)},
                "ln_2": norm(),
                "mlp": {"c_fc": dense(d, 4 * d), "c_proj": dense(4 * d, d)},
            }
            for i in range(layers)
        },
        "ln_f": norm(),
    }


class Decoder:
    """A GPT-2-shaped decoder; ``model(params, ids)`` → logits, like a Flax module."""

    def __init__(self, layers, d, heads, **_):
        self.config = {"n_layer": layers, "n_embd": d, "n_head": heads}

    def __call__(self, params, ids):
        cfg = self.config
        t = ids.shape[1]
        x = params["wte"]["embedding"][ids] + params["wpe"]["embedding"][:t]
        mask = jnp.tril(jnp.ones((t, t), bool))
        for i in range(cfg["n_layer"]):
            p = params["h"][str(i)]
            x = x + self._attention(p["attn"], _norm(p["ln_1"], x), mask)
            h = jax.nn.gelu(_dense(p["mlp"]["c_fc"], _norm(p["ln_2"], x)))
            x = x + _dense(p["mlp"]["c_proj"], h)
        return _norm(params["ln_f"], x) @ params["wte"]["embedding"].T

    def _attention(self, p, x, mask):
        b, t, d = x.shape
        n = self.config["n_head"]
        q, k, v = jnp.split(_dense(p["c_attn"], x), 3, axis=-1)
        q, k, v = (a.reshape(b, t, n, d // n).transpose(0, 2, 1, 3) for a in (q, k, v))
        w = jnp.where(mask, q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(d // n), -1e9)
        out = jax.nn.softmax(w, axis=-1) @ v
        return _dense(p["c_proj"], out.transpose(0, 2, 1, 3).reshape(b, t, d))


def _dense(p, x):
    return x @ p["kernel"] + p["bias"]


def _norm(p, x):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5) * p["scale"] + p["bias"]


class Temperature:
    """A logits processor, a plain object as HF's are."""

    def __init__(self, temperature):
        self.temperature = temperature

    def __call__(self, logits):
        return logits / self.temperature


def greedy_search(
    model, params, input_ids, max_length, pad_token_id, eos_token_id, processors, loop
):
    """HF's greedy search, closures and all (transformers/generation/flax_utils.py)."""
    batch, cur_len = input_ids.shape
    sequences = jnp.full((batch, max_length), pad_token_id, jnp.int32)
    sequences = lax.dynamic_update_slice(sequences, input_ids, (0, 0))
    state = (jnp.int32(cur_len), sequences, jnp.zeros((batch,), bool))

    def greedy_search_cond_fn(state):
        cur_len, _, is_sent_finished = state
        return ~((cur_len == max_length) | jnp.all(is_sent_finished))

    def greedy_search_body_fn(state):
        cur_len, sequences, is_sent_finished = state
        logits = model(params, sequences)[:, cur_len - 1]
        for p in processors:
            logits = p(logits)
        next_token = jnp.argmax(logits, axis=-1)
        next_token = next_token * ~is_sent_finished + pad_token_id * is_sent_finished
        is_sent_finished = is_sent_finished | (next_token == eos_token_id)
        sequences = lax.dynamic_update_slice(
            sequences, next_token[:, None].astype(jnp.int32), (0, cur_len)
        )
        return cur_len + 1, sequences, is_sent_finished

    return loop(greedy_search_cond_fn, greedy_search_body_fn, state)[1]


@functools.partial(jax.jit, static_argnames=("model", "max_length", "pad", "eos"))
def hoisted(params, input_ids, temperature, *, model, max_length, pad, eos):
    """The hand refactoring: params and the processor's value as arguments, ints static."""
    return greedy_search(
        model, params, input_ids, max_length, pad, eos, [Temperature(temperature)], lax.while_loop
    )


def main():
    size = args.size or ("tiny" if args.quick else "4-layer")
    cfg = SIZES[size]
    model = Decoder(**cfg)
    params = [init_params(jax.random.key(s), **cfg) for s in range(2)]
    sharding = _harness.data_sharding()  # --host-devices: a batch row per device
    batch = 2 if sharding is None else jax.device_count()
    ids = jax.random.randint(jax.random.key(7), (batch, cfg["prompt"]), 0, cfg["vocab"])
    if sharding is not None:
        ids = jax.device_put(ids, sharding)
    m, pad, eos = cfg["max_length"], 0, cfg["vocab"] - 1
    calls = {"n": 0}

    def params_now():
        calls["n"] += 1  # new parameter values on every call, as after a training step
        return params[calls["n"] % 2]

    def eager():
        return greedy_search(
            model, params_now(), ids, m, pad, eos, [Temperature(0.7)], lax.while_loop
        )

    cache_dir = tempfile.mkdtemp()

    def persistent():
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
        compilation_cache.reset_cache()
        try:
            return eager().block_until_ready()
        finally:
            jax.config.update("jax_compilation_cache_dir", None)
            compilation_cache.reset_cache()

    def stable():
        return greedy_search(
            model, params_now(), ids, m, pad, eos, [Temperature(0.7)], stablejit.while_loop
        )

    def hand():
        return hoisted(params_now(), ids, 0.7, model=model, max_length=m, pad=pad, eos=eos)

    outs = []
    for f in (eager, stable, hand):
        calls["n"] = 0  # the same params for each
        outs.append(f())
    assert all((o == outs[0]).all() for o in outs), "variants disagree"
    persistent()
    fast_calls = 20 if size == "tiny" else 10
    variants = {
        "lax.while_loop, fresh closures (eager)": ((lambda: eager().block_until_ready()), 1),
        "… with JAX's persistent compilation cache": (persistent, 1),
        "stablejit.while_loop, fresh closures": (
            (lambda: stable().block_until_ready()),
            fast_calls,
        ),
        "hoisted jax.jit (hand-refactored)": ((lambda: hand().block_until_ready()), fast_calls),
    }
    start = time.perf_counter()
    timings = _harness.interleaved(variants, args.rounds)
    t = {n: timings[n]["median_s"] for n in variants}
    eager_t, persistent_t, stable_t, hoisted_t = t.values()
    rows = [
        f"Greedy decoding, {size}: {cfg['layers']} layers, d={cfg['d']}, vocab {cfg['vocab']}, "
        f"{cfg['max_length'] - cfg['prompt']} new tokens, batch {batch}, {jax.device_count()} "
        "device(s); new params every call.",
        "",
        "| variant | per call (median) |",
        "|---|---:|",
        *(f"| {n} | {_harness.fmt_time(v)} |" for n, v in t.items()),
        "",
        f"stablejit.while_loop / hoisted jax.jit: **{stable_t / hoisted_t:.3f}×**  ",
        f"eager lax.while_loop / stablejit.while_loop: **{eager_t / stable_t:,.0f}×**  ",
        f"persistent-cache run / stablejit.while_loop: **{persistent_t / stable_t:,.0f}×**",
    ]
    _harness.write(
        f"greedy-{size}",
        args.out,
        {
            "benchmark": "greedy",
            "size": size,
            "config": cfg,
            "environment": _harness.environment(),
            "rounds": args.rounds,
            "timings": timings,
            "wall_s": time.perf_counter() - start,
            "ratios": {
                "stable_over_hoisted": stable_t / hoisted_t,
                "eager_over_stable": eager_t / stable_t,
                "persistent_over_stable": persistent_t / stable_t,
            },
        },
        "\n".join(rows),
    )


if __name__ == "__main__":
    main()
