"""Virtual environments: one per JAX line, created and filled by the harness.

Each created env gets stablejit (editable, from this checkout), jax/jaxlib at
the line's release, the pinned libraries and the selected suites' test
dependencies, all under one constraints file so that no dependency can move
jax or a pinned library. The existing ``main`` venv is only topped up with
what is missing, under the same constraints with jax held where it is.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from compat.suites import COMMON_DEPS, REPO, SUITE_TABLE, Env

_MARK = ".compat-installed.json"


def _log(msg: str) -> None:
    print(f"[compat] {msg}", file=sys.stderr, flush=True)


def python_of(env: Env) -> Path:
    return env.path / "bin" / "python"


def _interpreter(version: str) -> str:
    """A working ``python3.X``: pyenv's shims exist for every version but only
    run the globally selected ones, so fall back to pyenv's own folders."""
    candidates = [shutil.which(f"python{version}")]
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates += sorted(
        glob.glob(f"{root}/versions/{version}.*/bin/python{version}"), reverse=True
    )
    for exe in filter(None, candidates):
        ok = subprocess.run([exe, "-c", "import venv"], capture_output=True).returncode == 0
        if ok:
            return exe
    raise SystemExit(f"compat: no working python{version} found (PATH or pyenv)")


def installed_versions(env: Env, names: list[str]) -> dict[str, str | None]:
    """Installed distribution versions in ``env`` (None where missing)."""
    code = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for n in sys.argv[1:]:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: out[n] = None\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(
        [str(python_of(env)), "-c", code, *names], capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout)


def _requirements(env: Env, suites: list[str], jax: str) -> tuple[list[str], list[str]]:
    """(what to install, the constraints every install is held to)."""
    deps = list(COMMON_DEPS)
    for name in suites:
        deps += [d for d in SUITE_TABLE[name].deps if d not in deps]
    pinned = [f"{name}=={env.pins[name]}" for name in suites]
    constraints = [f"jax=={jax}", f"jaxlib=={jax}"]
    # Pins hold also where a library is only another suite's test dependency
    # (optax's tests import flax): every line pins all four.
    constraints += [f"{name}=={version}" for name, version in env.pins.items()]
    wanted = [f"jax=={jax}", f"jaxlib=={jax}", *pinned, *(d for d in deps if d not in env.pins)]
    # A pinned library needed as another suite's test dependency (optax's
    # tests import flax) comes in at its pin, through the constraints.
    wanted += [d for d in deps if d in env.pins and d not in suites]
    return wanted, constraints


def _pip(env: Env, args: list[str], constraints: list[str]) -> None:
    cfile = env.path / "compat-constraints.txt"
    if env.venv is not None:  # never write into a venv we do not own
        cfile = Path(os.environ.get("TMPDIR", "/tmp")) / f"compat-constraints-{os.getpid()}.txt"
    cfile.write_text("\n".join(constraints) + "\n")
    cmd = [str(python_of(env)), "-m", "pip", "install", "-q", "-c", str(cfile), *args]
    _log(" ".join(cmd))
    subprocess.run(cmd, check=True)


def ensure(env: Env, suites: list[str]) -> dict[str, str | None]:
    """Creates or tops up ``env`` for ``suites``; returns the versions in it."""
    names = ["jax", "jaxlib", *env.pins]
    if env.venv is not None:
        if not python_of(env).exists():
            raise SystemExit(f"compat: {env.name} expects a venv at {env.path}")
        have = installed_versions(env, names)
        jax = have["jax"] or env.jax
        wanted, constraints = _requirements(env, suites, jax)
        # Held where they are: a venv shared with development keeps its JAX
        # and whatever release of a library it already has.
        constraints = [c for c in constraints if have.get(c.split("==")[0]) is None]
        constraints += [f"{n}=={v}" for n, v in have.items() if v is not None]
        missing = _missing(env, wanted)
        if missing:
            _pip(env, missing, constraints)
    else:
        wanted, constraints = _requirements(env, suites, env.jax)
        digest = hashlib.sha256("\n".join(wanted + constraints).encode()).hexdigest()
        mark = env.path / _MARK
        done = json.loads(mark.read_text()) if mark.exists() else {}
        if not python_of(env).exists():
            _log(f"creating {env.path} with Python {env.python}")
            subprocess.run([_interpreter(env.python), "-m", "venv", str(env.path)], check=True)
            _pip(env, ["--upgrade", "pip"], [])
        if digest not in done.get("digests", []):
            _pip(env, ["-e", str(REPO), *wanted], constraints)
            done.setdefault("digests", []).append(digest)
            mark.write_text(json.dumps(done, indent=1) + "\n")
    return installed_versions(env, names)


def _missing(env: Env, wanted: list[str]) -> list[str]:
    bare = [w.split("==")[0].split("[")[0] for w in wanted]
    have = installed_versions(env, bare + ["stablejit"])
    missing = [w for w, b in zip(wanted, bare, strict=True) if have[b] is None]
    if have["stablejit"] is None:
        missing += ["-e", str(REPO)]
    return missing
