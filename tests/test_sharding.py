"""Sharded closures on 8 host devices (in a subprocess: the device count is
fixed when JAX starts)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "_sharding"


def _run(script: str, timeout: int = 300) -> str:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if done.returncode != 0:
        pytest.fail(f"{script} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def test_sharded_closures_shardings_shard_map_and_loops_on_eight_devices():
    assert _run("eight_devices.py").strip().endswith("ok")


def _free_port() -> int:
    """A free local port for jax.distributed's coordinator; the test is skipped on a
    machine that opens no sockets (a sandboxed accelerator host)."""
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    except OSError as e:
        pytest.skip(f"this machine opens no sockets, which jax.distributed needs ({e})")


def test_two_processes_trace_once_each_and_agree():
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPTS / "two_processes.py"), str(port), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # Different hash seeds: nothing that decides the program may depend on them.
            env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONHASHSEED": str(11 + 31 * i)},
        )
        for i in range(2)
    ]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=240)
            if p.returncode != 0:
                pytest.fail(f"process failed:\n{out[-2000:]}\n{err[-3000:]}")
            outs.append(out.strip().splitlines()[-1])
    finally:
        for p in procs:
            p.kill()
    assert [o.split()[:2] for o in outs] == [["ok", "0"], ["ok", "1"]]
    assert outs[0].split()[2] == outs[1].split()[2]  # the same global result
