"""``python -m stablejit run``: a program, with the stablejit census printed at its end.

Example:
    python -m stablejit run --mode jit train.py --epochs 3
    python -m stablejit run --mode off --report census.json -m mypackage.train
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from typing import Any


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m stablejit",
        description="stablejit tools. `run`: run a program and print how many jax.jit objects, "
        "traces and compiles it made, and what stablejit did about them.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        usage="python -m stablejit run [--mode off|jit|patch] [--report FILE.json] "
        "(script.py | -m module) [args ...]",
        help="run a script (or -m module) with the census",
    )
    run.add_argument(
        "--mode",
        choices=("off", "jit", "patch"),
        default="off",
        help="off: plain jax.jit, counted (default); jit: jax.jit is stablejit.stable_jit; "
        "patch: stablejit.patch() (jax.jit and jax.lax's loops)",
    )
    run.add_argument("--report", metavar="FILE.json", help="also write the census as JSON")
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a module, like python -m")
    run.add_argument("script", nargs="?", help="the script to run")
    return parser


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(ours, the program's)``: like python, everything after the script
    (or ``-m module``) belongs to the program, options included."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in ("--mode", "--report"):
            i += 2
        elif token == "-m":
            return argv[: i + 2], argv[i + 2 :]
        elif token.startswith("-") and token != "-":
            i += 1
        else:
            return argv[: i + 1], argv[i + 1 :]
    return argv, []


def run(mode: str, target: str, args: list[str], *, module: bool = False) -> int:
    """Runs a script (or module) as ``__main__`` under the census, then prints it.

    Arguments:
        mode: ``"off"``, ``"jit"`` or ``"patch"`` (see ``stablejit._census.install``).
        target: the script's path, or the module's name if ``module``.
        args: the program's arguments (``sys.argv[1:]`` as it sees them).
        module: run ``target`` as a module, like ``python -m``.

    Returns:
        The program's exit status: 0, the code it passed to ``sys.exit``, or
        1 if it raised (the traceback is printed first, as Python would).

    Example:
        >>> from stablejit.__main__ import run
        >>> callable(run)
        True
    """
    from stablejit import _census

    _census.install(mode)
    sys.argv = [target, *args]
    status = 0
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        status = _exit_status(e.code)
    except BaseException as e:  # noqa: BLE001 - reported as Python would, then the census
        _print_exception(e)
        status = 130 if isinstance(e, KeyboardInterrupt) else 1
    return status


def _print_exception(e: BaseException) -> None:
    """The traceback from the program's own frames, as ``python script.py`` shows it."""
    import traceback

    tb = e.__traceback__
    while tb is not None and (
        tb.tb_frame.f_code.co_filename == __file__ or "runpy" in tb.tb_frame.f_code.co_filename
    ):
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)


def _exit_status(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # as Python does with sys.exit("message")
    return 1


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, program = argv[:1], []
    if argv[:1] == ["run"]:
        ours, program = _split(argv[1:])
        ours.insert(0, "run")
    else:
        ours = argv
    parser = _parser()
    ns = parser.parse_args(ours)
    if (ns.module is None) == (ns.script is None):
        parser.error("run: give a script or -m module (not both)")
    from stablejit import _census

    module = ns.module is not None
    status = run(ns.mode, ns.module if module else ns.script, program, module=module)
    report = _census.report()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass  # the program closed its stdout (json.tool does)
    print("\n" + _census.render(report), file=sys.stderr)
    if ns.report:
        with open(ns.report, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
