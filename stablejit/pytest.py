"""A pytest plugin: the stablejit census of a test run. Opt-in only.

``pytest -p stablejit.pytest --stablejit=off|jit|patch [--stablejit-report=FILE.json]``
installs the mode before conftest files and test modules are imported, and
prints the census (``jax.jit`` objects, traces, compiles, stablejit's hits and
misses, the redefined closures, why stablejit retraced) at the end of the run.

No ``pytest11`` entry point registers it: a project enables it with ``-p``,
or with ``addopts = "-p stablejit.pytest --stablejit=jit"`` in its pytest
configuration.
"""

from __future__ import annotations

import json
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
        "--stablejit-report",
        metavar="FILE.json",
        default=None,
        help="also write the stablejit census as JSON",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args) -> None:
    """Installs the mode before any conftest file or test module is imported."""
    mode = early_config.known_args_namespace.stablejit
    if mode is None:
        if early_config.known_args_namespace.stablejit_report:
            raise pytest.UsageError("--stablejit-report needs --stablejit=off|jit|patch")
        return
    from stablejit import _census

    _census.install(mode)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Prints the census block; writes the JSON report if asked."""
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
