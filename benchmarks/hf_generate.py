"""HuggingFace transformers' Flax greedy ``generate()``, unpatched and under patch mode.

    python benchmarks/hf_generate.py [--device gpu] [--rounds N]

Needs the ``hf`` extra. A tiny randomly initialised GPT-2 (no downloads);
new parameter values on every call. Interleaved per call: ``model.generate``
as shipped (its greedy loop recompiles every call), and the same inside
``stablejit.patch()``. Writes ``hf-generate-<backend>.{json,md}`` under ``local-results/benchmarks/`` (``benchmarks/results/`` with ``--save``).
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(__doc__, rounds=7, quick_rounds=3)

import os  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import transformers  # noqa: E402

import stablejit  # noqa: E402


def _map(fn, tree):
    if isinstance(tree, dict):
        return {k: _map(fn, v) for k, v in tree.items()}
    return fn(tree)


def main():
    transformers.logging.set_verbosity_error()
    cfg = transformers.GPT2Config(
        vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4,
        bos_token_id=0, eos_token_id=255, pad_token_id=0,
    )  # fmt: skip
    model = transformers.FlaxGPT2LMHeadModel(cfg, seed=0)
    params = [_map(lambda x, s=s: x * (1.0 + 0.01 * s), model.params) for s in range(2)]
    ids = jnp.arange(16, dtype=jnp.int32).reshape(2, 8)
    calls = {"n": 0}

    def generate():
        calls["n"] += 1
        out = model.generate(ids, params=params[calls["n"] % 2], max_length=32, do_sample=False)
        return np.asarray(out.sequences)

    def patched():
        with stablejit.patch():
            return generate()

    calls["n"] = 0
    want = generate()
    calls["n"] = 0
    assert (patched() == want).all(), "patched generate() differs"
    variants = {
        "generate() as shipped": (generate, 1),
        "generate() under stablejit.patch()": (patched, 1),
    }
    timings = _harness.interleaved(variants, args.rounds)
    t = {n: timings[n]["median_s"] for n in variants}
    before, after = t.values()
    rows = [
        "Tiny Flax GPT-2 (2 layers, d=64, vocab 256), greedy, 24 new tokens, batch 2, "
        f"transformers {transformers.__version__}; new params every call.",
        "",
        "| variant | per call (median) |",
        "|---|---:|",
        *(f"| {n} | {_harness.fmt_time(v)} |" for n, v in t.items()),
        "",
        f"speedup under patch mode: **{before / after:.1f}×**",
    ]
    _harness.write(
        "hf-generate",
        args.out,
        {
            "benchmark": "hf-generate",
            "transformers": transformers.__version__,
            "environment": _harness.environment(),
            "rounds": args.rounds,
            "timings": timings,
            "ratios": {"shipped_over_patched": before / after},
            "cache_info": stablejit.cache_info()._asdict(),
        },
        "\n".join(rows),
    )


if __name__ == "__main__":
    main()
