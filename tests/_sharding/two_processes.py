"""Run by tests/test_sharding.py as two processes: ``python two_processes.py PORT ID``.

Each process owns one CPU device of a 2-device global mesh, builds the same
closures on every step, and checks its shards of the results.
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"

import jax  # noqa: E402

port, pid = int(sys.argv[1]), int(sys.argv[2])
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}",
    num_processes=2,
    process_id=pid,
    initialization_timeout=60,
)

import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from stablejit import stable_jit  # noqa: E402

assert jax.process_count() == 2 and jax.device_count() == 2
mesh = Mesh(np.array(jax.devices()), ("data",))
rows = NamedSharding(mesh, P("data"))
full = np.arange(8.0, dtype=np.float32).reshape(4, 2)
x = jax.make_array_from_process_local_data(rows, full[2 * pid : 2 * pid + 2])
traces = []

for step in range(4):
    w_full = np.full((4, 2), step + 1.0, np.float32)
    w = jax.make_array_from_process_local_data(rows, w_full[2 * pid : 2 * pid + 2])

    def inner(x):
        traces.append(1)
        return (x * w).sum(axis=1, keepdims=True) + x  # noqa: B023 - called right away

    out = stable_jit(inner)(x)
    want = (full * w_full).sum(axis=1, keepdims=True) + full
    for shard in out.addressable_shards:
        np.testing.assert_allclose(np.asarray(shard.data), want[shard.index])

total = jax.jit(lambda a: a.sum(), out_shardings=NamedSharding(mesh, P()))(out)
assert len(traces) == 1, traces
print(f"ok {pid} {float(total.addressable_data(0))}")
jax.distributed.shutdown()
