"""A pytest plugin: the stablejit census of a test run. Opt-in only.

``pytest -p stablejit.pytest --stablejit=off|jit|patch [--stablejit-report=FILE.json]``
installs the mode before conftest files and test modules are imported, and
prints the census (``jax.jit`` objects, traces, compiles, stablejit's hits and
misses, the redefined closures, why stablejit retraced) at the end of the run.

No ``pytest11`` entry point registers it: a project enables it with ``-p``,
or with ``addopts = "-p stablejit.pytest --stablejit=jit"`` in its pytest
configuration.

``--stablejit-verify[=P]`` turns on verify mode (``stablejit.config.verify``,
P = 1 if not given): a hit is, with probability P, traced again and compared
with what the cache ran, and a test during which a stale hit is found fails (so
does one under verify mode turned on otherwise: ``$STABLEJIT_VERIFY``,
``config.verify``), and the summary says how many hits were verified. With
or without ``--stablejit``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

_MODES = ("off", "jit", "patch")


def pytest_addoption(parser: pytest.Parser) -> None:
    """Declares ``--stablejit`` and ``--stablejit-report``."""
    group = parser.getgroup("stablejit", "stablejit census")
    group.addoption(
        "--stablejit",
        choices=_MODES,
        default=None,
        help="run with the stablejit census: off (plain jax.jit, counted), "
        "jit (jax.jit is stablejit.stable_jit) or patch (stablejit.patch())",
    )
    group.addoption(
        "--stablejit-verify",
        metavar="P",
        nargs="?",
        const=1.0,
        default=None,
        type=_probability,
        help="verify mode: trace each cache hit again with probability P (1 if not given) "
        "and fail the test if the cache ran another program",
    )
    group.addoption(
        "--stablejit-report",
        metavar="FILE.json",
        default=None,
        help="also write the stablejit census as JSON",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args) -> None:
    """Installs the mode before any conftest file or test module is imported."""
    verify = early_config.known_args_namespace.stablejit_verify
    if verify is not None:
        import stablejit

        stablejit.config.verify = verify
    mode = early_config.known_args_namespace.stablejit
    if mode is None:
        if early_config.known_args_namespace.stablejit_report:
            raise pytest.UsageError("--stablejit-report needs --stablejit=off|jit|patch")
        return
    from stablejit import _census

    _census.install(mode)


def _probability(raw: str) -> float:
    p = float(raw)
    if not 0 <= p <= 1:
        raise ValueError(raw)
    return p


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Fails a test during which verify mode found a stale hit, however it
    was turned on (the option, ``$STABLEJIT_VERIFY``, ``config.verify``)."""
    before = _mismatches()
    result = yield
    found = _mismatches() - before
    if found:
        from stablejit._runtime import verify

        shown = list(verify.REPORTED)[-found:]
        pytest.fail(f"stablejit verify mode found {found} stale hit(s):\n" + "\n".join(shown))
    return result


def _mismatches() -> int:
    """Mismatches verify mode found so far (none before stablejit is imported)."""
    verify = sys.modules.get("stablejit._runtime.verify")
    return 0 if verify is None else verify.mismatches()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Prints the census block; writes the JSON report if asked. Under
    verify mode, says how many hits it verified and found stale."""
    verify = sys.modules.get("stablejit._runtime.verify")
    if verify is not None and (
        verify.TOTALS[0] or config.getoption("stablejit_verify") is not None
    ):
        verified, found = verify.TOTALS
        terminalreporter.write_line(
            f"stablejit verify: {verified} hits verified, {found} mismatches"
        )
    if config.getoption("stablejit") is None:
        return
    from stablejit import _census

    report = _census.report()
    terminalreporter.write_sep("=", "stablejit census")
    terminalreporter.write_line(_census.render(report))
    path = config.getoption("stablejit_report")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        terminalreporter.write_line(f"stablejit census written to {path}")
