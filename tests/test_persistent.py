"""Persistent mode: a fresh process finds an earlier process's executable.

Each case runs tests/_persistent/child.py in fresh processes (persistence is
about what a new process sees), and checks its trace count and result."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import stablejit
from stablejit._runtime import persist as _persist

CHILD = Path(__file__).parent / "_persistent" / "child.py"


def _run(directory, *args, **env):
    proc = subprocess.run(
        [sys.executable, str(CHILD), str(directory), *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu", **env},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _entries(directory):
    return sorted(Path(directory).glob("*.sjx"))


def test_a_second_process_traces_zero_times_and_agrees(tmp_path):
    first, _ = _run(tmp_path)
    assert first["traces"] == 1 and len(_entries(tmp_path)) == 1
    second, _ = _run(tmp_path)
    assert second == {**first, "traces": 0}


def test_new_array_values_reuse_the_entry(tmp_path):
    _run(tmp_path, 1.0)
    other, _ = _run(tmp_path, 3.0)  # the child checks the result against numpy
    assert other["traces"] == 0


def test_the_key_does_not_depend_on_hash_randomisation(tmp_path):
    _run(tmp_path, PYTHONHASHSEED="1")
    second, _ = _run(tmp_path, PYTHONHASHSEED="2")
    assert second["traces"] == 0


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_a_damaged_file_falls_back_to_compiling(tmp_path, damage):
    _run(tmp_path)
    shutil.rmtree(tmp_path / "xla")  # so the fallback compiles afresh, and rewrites
    (entry,) = _entries(tmp_path)
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        entry.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    else:
        entry.write_bytes(b"")
    again, err = _run(tmp_path)
    assert again["traces"] == 1
    assert "ignoring persistent entry" in err
    third, _ = _run(tmp_path)  # rewritten whole by the fallback
    assert third["traces"] == 0


def test_another_key_under_the_same_digest_is_detected(tmp_path):
    _run(tmp_path)
    (entry,) = _entries(tmp_path)
    data = entry.read_bytes()
    body = data[:-32]
    magic = b"STABLEJIT-EXECUTABLE-1\n"
    n = int.from_bytes(body[len(magic) : len(magic) + 8], "little")
    key = body[len(magic) + 8 : len(magic) + 8 + n]
    forged = key.replace(b"stablejit-key", b"stablejit-kez")
    import hashlib

    new_body = magic + len(forged).to_bytes(8, "little") + forged + body[len(magic) + 8 + n :]
    entry.write_bytes(new_body + hashlib.sha256(new_body).digest())
    again, err = _run(tmp_path)
    assert again["traces"] == 1 and "another key has this digest" in err


def test_another_jax_version_misses(tmp_path):
    _run(tmp_path)
    shutil.rmtree(tmp_path / "xla")  # JAX's cache does not know the pretend version
    other, _ = _run(tmp_path, FAKE_JAX_VERSION="9.9.9")
    assert other["traces"] == 1
    assert len(_entries(tmp_path)) == 2


def test_identity_keyed_values_are_not_persisted_and_say_so(tmp_path):
    first, err = _run(tmp_path, IDENTITY="1")
    assert first["traces"] == 1 and _entries(tmp_path) == []
    assert "not persisted" in err and "keyed by identity" in err


def test_concurrent_writers_leave_one_whole_entry(tmp_path):
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        for _ in range(4)
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()[-2000:]
    assert len(_entries(tmp_path)) == 1
    assert not list(tmp_path.glob("*.tmp"))
    reader, _ = _run(tmp_path)
    assert reader["traces"] == 0


def test_the_directory_is_bounded(tmp_path):
    for i in range(3):
        (tmp_path / f"{i:064x}.sjx").write_bytes(b"x" * 1000)
        os.utime(tmp_path / f"{i:064x}.sjx", (i, i))
    _persist._evict(str(tmp_path), 2500)
    assert [p.name[:4] for p in _entries(tmp_path)] == ["0000", "0000"]
    assert not (tmp_path / f"{0:064x}.sjx").exists()


def test_config_validates_and_reads_the_environment(tmp_path, monkeypatch):
    with pytest.raises(TypeError, match="persistent_dir"):
        stablejit.config.persistent_dir = 3
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        stablejit.config.persistent_dir = f
    stablejit.config.persistent_dir = tmp_path
    assert stablejit.config.persistent_dir == str(tmp_path)
    stablejit.config.persistent_dir = None
    monkeypatch.setenv("STABLEJIT_PERSISTENT_DIR", str(tmp_path))
    assert stablejit._config.Config().persistent_dir == str(tmp_path)


def test_an_executable_served_by_jax_cache_is_not_persisted_and_it_says_so(tmp_path):
    # Executables JAX's cache serves do not survive serialization on every
    # backend (XLA:CPU); one compiled afresh does.
    first, _ = _run(tmp_path)
    assert (tmp_path / "xla").is_dir()  # persistent_dir also holds JAX's cache
    (entry,) = _entries(tmp_path)
    entry.unlink()
    second, err = _run(tmp_path)  # JAX's cache serves it: not written
    assert second["traces"] == 1 and _entries(tmp_path) == []
    assert "JAX's persistent compilation cache served the executable" in err
    third, _ = _run(tmp_path)
    assert third["traces"] == 1


def test_shapes_devices_meshes_and_shardings_are_spelled_with_their_device_order():
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from stablejit._runtime import persist as _persist

    mesh = Mesh(np.array(jax.devices()), ("x",))
    sharding = NamedSharding(mesh, PartitionSpec("x"))
    values = [
        jax.ShapeDtypeStruct((3,), jnp.float32),
        jax.ShapeDtypeStruct((4,), jnp.float32),
        jax.ShapeDtypeStruct((3,), jnp.int32),
        jax.ShapeDtypeStruct((3,), jnp.float32, sharding=sharding),
        jax.devices()[0],
        mesh,
        sharding,
    ]
    spelled = [_persist._spell(v) for v in values]
    assert len({repr(s) for s in spelled}) == len(values)  # all told apart
    ids = tuple(d.id for d in jax.devices())
    assert spelled[5][-1] == ids and spelled[6][-1] == ids

    def plain(x):  # only process-independent atoms
        return (
            x is None
            or type(x) in (bool, int, str, bytes)
            or (type(x) is tuple and all(plain(y) for y in x))
        )

    assert all(plain(s) for s in spelled)


class ProcessWide:
    """One instance for the process, importable by name, keyed by identity."""


PROCESS_WIDE = ProcessWide()
PROCESS_WIDE.__qualname__ = "PROCESS_WIDE"
PROCESS_WIDE.__module__ = __name__


def test_objects_keyed_by_identity_are_spelled_by_their_importable_name():
    # stable_jit itself is one (a C object where the accelerator is built, read
    # by every function that jits another), as is any class registered so.
    from stablejit._fingerprint.classify import IDENTITY
    from stablejit._fingerprint.kind import TABLE, register_kind

    assert _persist._spell(stablejit.stable_jit)[0] == "obj"
    assert "stablejit" in _persist._spell(stablejit.stable_jit)[1]
    register_kind(ProcessWide, IDENTITY)
    try:
        spelled = _persist._spell(PROCESS_WIDE)
        assert spelled[0] == "obj" and f"{__name__}:PROCESS_WIDE@" in spelled[1]
        with pytest.raises(_persist.NotPersistable):  # no name leads back to it
            _persist._spell(ProcessWide())
    finally:
        TABLE.pop(ProcessWide)


def test_a_static_value_keyed_by_its_own_equality_is_spelled_as_the_value():
    # Such a value sits in the key in a wrapper (see OwnEquality): what is
    # not persisted, and said so, is the user's value, not the wrapper.
    from stablejit._markers import ByOwnEquality

    value = ProcessWide()
    with pytest.raises(_persist.NotPersistable) as refused:
        _persist._spell(ByOwnEquality(value, 0))
    assert refused.value.args == (value,)
