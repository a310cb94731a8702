"""pytest plugin: one JSON line per test outcome, for the compat harness.

Loaded with ``-p compat_outcomes`` (the harness puts this folder, and only
this folder, on PYTHONPATH: the repository root holds a ``tests`` package
that would shadow suites' own ``tests``). Lines are appended as tests finish,
so a run killed by its timeout still leaves every outcome it reached.

The file is named by ``$COMPAT_OUTCOMES``. Each line is
``{"id", "outcome", "message"}`` where outcome is passed, failed, error
(setup/teardown or collection), skipped, xfailed or xpassed, and message the
first line of the failure (the exception line pytest shows after ``E``).
With ``$COMPAT_SHARD`` set to ``I/N``, only the tests whose id hashes
(CRC-32) to I of N run: a shard of a suite whose time sits in one file.
``$COMPAT_PART`` (``J/M``) splits what remains the same way, by another hash:
a part of a shard.

A test's start is a line too (outcome ``started``): a test that kills the
process leaves its start alone, and the harness runs the suite again
without the tests listed in ``$COMPAT_CRASHED`` (one id per line).

A test's line also carries ``compiles``: the XLA compiles JAX reported from
its setup to its teardown, so that a mode compiling more than stock is
traced to the tests that do.

Each test starts with Python's and NumPy's global generators seeded from its
id, in every mode: suites that draw unseeded shapes on purpose (equinox's
``GetKey`` fixture, which diffrax uses) would otherwise compile other
signatures in each run, and a mode's compiles could not be told from
stock's run to run.
"""

from __future__ import annotations

import functools
import json
import os
import random
import sys
import zlib

import pytest

_PATH = os.environ.get("COMPAT_OUTCOMES")
_compiles = [0]
_pending: list[dict] = []  # a running test's lines, written when it ends


def pytest_collection_modifyitems(config, items) -> None:
    # A part of a shard hashes the id salted, so that it splits a shard
    # sharded by test too.
    for variable, salt in (("COMPAT_SHARD", b""), ("COMPAT_PART", b"part:")):
        value = os.environ.get(variable)
        if not value:
            continue
        i, n = (int(x) for x in value.split("/"))
        keep, drop = [], []
        for item in items:
            mine = zlib.crc32(salt + item.nodeid.encode()) % n == i - 1
            (keep if mine else drop).append(item)
        items[:] = keep
        config.hook.pytest_deselected(items=drop)
    crashed = os.environ.get("COMPAT_CRASHED")
    if crashed and os.path.exists(crashed):
        with open(crashed, encoding="utf-8") as f:
            skip = set(f.read().split("\n")) - {""}
        drop = [item for item in items if item.nodeid in skip]
        items[:] = [item for item in items if item.nodeid not in skip]
        config.hook.pytest_deselected(items=drop)


def _count(compile_event: str, event: str, duration: float, **_) -> None:
    if event == compile_event:
        _compiles[0] += 1


def pytest_configure(config) -> None:
    try:
        from jax import monitoring
    except ImportError:  # a suite without JAX: outcomes only
        return
    try:  # the name stablejit's own counters listen for
        from stablejit._diagnostics.events import COMPILE
    except ImportError:  # a stablejit revision from before that module
        from jax._src.dispatch import BACKEND_COMPILE_EVENT as COMPILE
    monitoring.register_event_duration_secs_listener(functools.partial(_count, COMPILE))


def _first_line(report) -> str:
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # skips: (file, line, reason)
        return str(longrepr[-1]).splitlines()[0] if longrepr[-1] else ""
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and crash.message:
        return crash.message.strip().splitlines()[0][:500]
    # Collection errors carry only text: its "E   " lines hold the exception.
    lines = [line for line in str(longrepr).splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    errors = [line for line in errors if line and not line.startswith("Traceback")]
    return (errors[0] if errors else lines[-1] if lines else "")[:500]


def _write(entry: dict) -> None:
    if not _PATH:
        return
    with open(_PATH, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """One line per test: its call phase, or the setup/teardown phase that failed."""
    if report.when == "call":
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        else:
            outcome = report.outcome
    elif report.failed:
        outcome = "error"
    elif report.skipped and report.when == "setup":
        outcome = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    else:
        return
    message = "" if outcome == "passed" else _first_line(report)
    _pending.append({"id": report.nodeid, "outcome": outcome, "message": message})


def _seed(nodeid: str) -> None:
    seed = zlib.crc32(nodeid.encode())
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _write({"id": item.nodeid, "outcome": "started"})
    _seed(item.nodeid)  # before its fixtures: GetKey draws its seed there
    start = _compiles[0]
    yield
    for entry in _pending:
        _write({**entry, "compiles": _compiles[0] - start})
    _pending.clear()


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """A module that fails to import is one error, named by the module."""
    if report.failed:
        _write({"id": report.nodeid, "outcome": "error", "message": _first_line(report)})
