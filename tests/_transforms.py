"""The enclosing transformations the loop tests wrap programs in, each ``f -> function of x``.

Stock JAX's own ``jit``, ``scan`` and ``cond``, taken before any test patches them: an outer
transformation is always stock's, whatever the loops inside are.
"""

import jax
import jax.numpy as jnp
from jax import lax

JIT, SCAN, COND = jax.jit, lax.scan, lax.cond


def _batched(f):
    return lambda x: jax.vmap(f)(jnp.stack([x, x * 2]))[1]


TRANSFORMS = {
    "jit": JIT,
    "vmap": _batched,
    "grad": lambda f: jax.grad(lambda x: f(x).sum()),
    "jvp": lambda f: lambda x: jax.jvp(f, (x,), (x,))[1],
    "linearize": lambda f: lambda x: jax.linearize(f, x)[1](x),
    "checkpoint": jax.checkpoint,
    "scan body": lambda f: lambda x: SCAN(lambda c, _: (f(c), None), x, None, length=2)[0],
    "cond branch": lambda f: lambda x: COND(x[0] > 0, f, jnp.cos, x),
}
"""Each transformation, staged or not: a function of ``x`` (an array of three floats)."""

NESTED = {
    "jit of vmap": lambda f: JIT(_batched(f)),
    "vmap of jit": lambda f: _batched(JIT(f)),
    "vmap of grad": lambda f: _batched(jax.grad(lambda y: f(y).sum())),
}
"""Two transformations, one inside the other."""
