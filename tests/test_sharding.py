"""Sharded closures on 8 host devices (in a subprocess: the device count is
fixed when JAX starts)."""

import os
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
