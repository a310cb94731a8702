"""One fresh process, one first call: run by benchmarks/persistent.py.

    python benchmarks/_first_call.py <seed|greedy|hf> <none|jax-cache|stablejit> <dir> [size]

Prints JSON: the seconds of the first call (inputs built beforehand; for the
decoders also of their while loop alone, the function that is cached), and how
many times the user's function was traced. ``hf`` is transformers' own Flax
GPT-2 ``generate()`` (a tiny random model), run under ``stablejit.patch()``
for the stablejit variant.
"""

import contextlib
import functools
import gc
import json
import os
import sys
import time

case, variant, directory = sys.argv[1:4]
size = sys.argv[4] if len(sys.argv) > 4 else "tiny"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.argv = [sys.argv[0]]  # greedy parses its own command line on import
import greedy  # noqa: E402  (sets JAX_PLATFORMS before jax is imported)
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import stablejit  # noqa: E402

if variant == "jax-cache":
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
elif variant == "stablejit":
    stablejit.config.persistent_dir = directory
jit = stablejit.stable_jit if variant == "stablejit" else jax.jit
loop = stablejit.while_loop if variant == "stablejit" else lax.while_loop
TRACES = []
LOOP = []


def timed(fn, *args):
    # The cached function itself: the loop, apart from the eager set-up
    # operations the decoder runs before it.
    start = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    LOOP.append(time.perf_counter() - start)
    return out


if case == "seed":
    x = jnp.arange(4.0)

    def run():
        def inner(x):
            TRACES.append(1)
            return x * 2

        return jit(inner)(x)
elif case == "greedy":
    cfg = greedy.SIZES[size]
    model = greedy.Decoder(**cfg)
    params = greedy.init_params(jax.random.key(0), **cfg)
    ids = jax.random.randint(jax.random.key(7), (2, cfg["prompt"]), 0, cfg["vocab"])
    jax.block_until_ready((params, ids))

    class Counted(greedy.Temperature):
        def __call__(self, logits):
            TRACES.append(1)
            return super().__call__(logits)

    def run():
        m, eos = cfg["max_length"], cfg["vocab"] - 1
        return greedy.greedy_search(
            model, params, ids, m, 0, eos, [Counted(0.7)], functools.partial(timed, loop)
        )
else:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    transformers.logging.set_verbosity_error()
    hf_cfg = transformers.GPT2Config(
        vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4,
        bos_token_id=0, eos_token_id=255, pad_token_id=0,
    )  # fmt: skip
    model = transformers.FlaxGPT2LMHeadModel(hf_cfg, seed=0)
    ids = jnp.arange(16, dtype=jnp.int32).reshape(2, 8)
    jax.block_until_ready(model.params)

    class CountTraces(transformers.FlaxLogitsProcessor):
        # generate() runs the loop body once eagerly: count traced calls only.
        def __call__(self, input_ids, scores, cur_len):
            if isinstance(scores, jax.core.Tracer):
                TRACES.append(1)
            return scores

    def run():
        patched = stablejit.patch() if variant == "stablejit" else contextlib.nullcontext()
        with patched:
            inner = lax.while_loop  # generate() looks it up here when it runs
            lax.while_loop = functools.partial(timed, inner)
            try:
                processors = transformers.FlaxLogitsProcessorList([CountTraces()])
                out = model.generate(
                    ids, max_length=32, do_sample=False, logits_processor=processors
                )
            finally:
                lax.while_loop = inner
        return out.sequences


# A full collection of what the imports and set-up allocated falls due about
# here (~80 ms in these processes): run it before the clock starts, in every
# variant, so the call is timed rather than where a collection happens to land.
gc.collect()
start = time.perf_counter()
out = jax.block_until_ready(run())
first = time.perf_counter() - start
result = {"first_call_s": first, "traces": len(TRACES), "checksum": float(out.sum())}
if LOOP:
    result["loop_first_call_s"] = LOOP[0]
print(json.dumps(result))
