"""Run in a subprocess by tests/test_sharding.py: JAX must see 8 host devices
from the start, which XLA_FLAGS can only arrange before JAX is imported."""

import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import stablejit  # noqa: E402
from stablejit import stable_jit  # noqa: E402

assert jax.device_count() == 8
mesh = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
rows, cols = NamedSharding(mesh, P("data", None)), NamedSharding(mesh, P(None, "model"))
both = NamedSharding(mesh, P("data", "model"))
x = jax.device_put(jnp.arange(128.0).reshape(16, 8), rows)
traces = []


def step(w, x):
    def inner(x):
        traces.append(1)
        return jnp.tanh(x @ w)

    return stable_jit(inner)(x)


def check(got, want):
    assert got.sharding.is_equivalent_to(want.sharding, got.ndim), (got.sharding, want.sharding)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


# 1. A closed-over sharded array is a sharded input: same program, shardings
#    and values as jax.jit with the array as an argument; new values do not retrace.
hoisted = jax.jit(lambda x, w: jnp.tanh(x @ w))
for i in range(3):
    w = jax.device_put(jnp.full((8, 4), 0.01 * (i + 1)), both)
    check(step(w, x), hoisted(x, w))
assert len(traces) == 1, traces
compiled = stable_jit(lambda x: x @ w).lower(x).compile()
assert len(compiled.input_shardings[0]) == 1  # the user's x alone, as for jax.jit
assert compiled._full.input_shardings[0][0] == both  # the lifted w, not gathered

# 2. in_shardings / out_shardings apply to the user's arguments, as for jax.jit.
f = stable_jit(lambda x: (x @ w) * 2, in_shardings=rows, out_shardings=cols)
g = jax.jit(lambda x: (x @ w) * 2, in_shardings=rows, out_shardings=cols)
check(f(jnp.ones((16, 8))), g(jnp.ones((16, 8))))


# 3. shard_map and a mesh context inside the wrapped function.
def smap(x):
    body = lambda a: a * 2 + w.sum()  # noqa: E731
    return jax.shard_map(body, mesh=mesh, in_specs=P("data", None), out_specs=P("data", None))(x)


check(stable_jit(smap)(x), jax.jit(smap)(x))
with jax.sharding.use_mesh(mesh) if hasattr(jax.sharding, "use_mesh") else mesh:
    h = lambda x: jax.lax.with_sharding_constraint(x * 2, P("data", "model"))  # noqa: E731
    check(stable_jit(h)(jnp.ones((8, 4))), jax.jit(h)(jnp.ones((8, 4))))

# 4. The loops, over a sharded carry and sharded closed-over params.
carry = stablejit.fori_loop(0, 3, lambda i, c: jnp.tanh(c @ w @ w.T), x)
check(carry, jax.jit(lambda x: jax.lax.fori_loop(0, 3, lambda i, c: jnp.tanh(c @ w @ w.T), x))(x))
print("ok")
