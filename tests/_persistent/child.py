"""Run by test_persistent.py in a fresh process: one call of a closure
through stable_jit with persistence on; prints the result and trace count."""

import json
import os
import sys

import jax.numpy as jnp
import numpy as np

import stablejit
from stablejit._runtime import persist as _persist

stablejit.config.persistent_dir = sys.argv[1]
stablejit.config.explain_misses = True
if os.environ.get("FAKE_JAX_VERSION"):
    real = _persist._environment
    _persist._environment = lambda: (*real(), os.environ["FAKE_JAX_VERSION"])

TRACES = []
MODES = {"a", "b", "c"}  # a set constant: its order follows PYTHONHASHSEED


class Handle:  # keyed by identity: not persistable
    pass


if os.environ.get("IDENTITY"):
    stablejit.register_type(Handle, "identity")


def step(params, x, mode, handle=None):
    def apply(y):
        TRACES.append(1)
        assert mode in MODES
        h = jnp.tanh(y @ params["w"] + params["b"])
        return {"out": h * 2 if mode == "a" else h, "n": handle is None}

    return stablejit.stable_jit(apply)(x)


scale = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
params = {"w": jnp.full((3, 2), 0.5 * scale), "b": jnp.arange(2.0)}
x = jnp.ones((4, 3))
out = step(params, x, "a", Handle() if os.environ.get("IDENTITY") else None)
want = np.tanh(np.ones((4, 3)) @ np.full((3, 2), 0.5 * scale) + np.arange(2.0)) * 2
np.testing.assert_allclose(out["out"], want, rtol=1e-6)
print(json.dumps({"traces": len(TRACES), "sum": float(out["out"].sum())}))
