"""The census's modes: what ``install`` swaps in for ``jax.jit``, and how it listens.

The census has to see every ``jax.jit`` the program makes, so it replaces
``jax.jit`` itself with a thin counting wrapper, before the program is
imported; the mode decides what that wrapper stands for (plain ``jax.jit``,
``stable_jit``, or stablejit's patch). ``jax.lax``'s loops get one too: an
eager loop traces and compiles without any ``jax.jit`` object, once per new
body, and only its functions' code can name it. Installing is kept apart from the
tallies and the report: it is the only part that changes global state.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import jax
from jax import monitoring

from .._config import config
from .._patch import patch
from .._route import may_cache
from .._runtime.api import stable_jit
from .counts import CENSUS
from .messages import RetraceFilter

MODES = ("off", "jit", "patch")

# jax.lax's loops, and where each takes its functions: positions, keyword names.
_LOOPS = {
    "while_loop": ((0, 1), ("cond_fun", "body_fun")),
    "fori_loop": ((2,), ("body_fun",)),
    "scan": ((0,), ("f",)),
    "map": ((0,), ("f",)),
    "cond": ((1, 2), ("true_fun", "false_fun")),
    "switch": ((1,), ("branches",)),
}


class _Counting:
    """A counting wrapper standing for ``target``: an object, not a closure,
    so that stablejit keys a function that holds it (``from jax import jit``,
    ``wl = lax.while_loop``) by what it stands for, as it keys the function it
    replaces, never by the census it writes to, which changes at every event
    (keyed, it would retrace what it counts)."""

    def __init__(self, target: Any) -> None:
        functools.update_wrapper(self, target)

    def __repr__(self) -> str:
        return repr(self.__wrapped__)


class _CountingJit(_Counting):
    """``jax.jit`` (``target``), counting what it is called on."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not args:
            # The decorator factory (``@jax.jit(static_argnums=...)``): let
            # ``target`` check the options, count when it is applied.
            self.__wrapped__(**kwargs)
            return functools.partial(self, **kwargs)
        CENSUS.note(args[0])
        return self.__wrapped__(*args, **kwargs)


def _functions_of(loop: str, args: tuple, kwargs: dict) -> list:
    """The functions a call of ``jax.lax``'s ``loop`` was given (a switch's branches too)."""
    positions, names = _LOOPS[loop]
    found = [args[i] for i in positions if i < len(args)]
    found += [kwargs[n] for n in names if n in kwargs]
    out = []
    for f in found:
        out.extend(f if isinstance(f, (list, tuple)) else [f])
    return [f for f in out if callable(f)]


class _CountingLoop(_Counting):
    """``target`` (``jax.lax``'s ``loop``, or stablejit's in patch mode), counting the
    functions of its top-level calls, those that compile a loop of their own (stablejit's
    loops cache exactly these): under a trace (``jit``, a loop body) the loop is compiled with
    the program around it, counted where that program is; under ``vmap``, ``grad`` or
    ``jax.disable_jit()`` no cache applies."""

    def __init__(self, loop: str, target: Any) -> None:
        super().__init__(target)
        self.loop = loop

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if may_cache():
            CENSUS.note_loop(self.loop, _functions_of(self.loop, args, kwargs))
        return self.__wrapped__(*args, **kwargs)


def install(mode: str) -> None:
    """Starts the census for this process, in one of three modes.

    Call it before the code under test is imported: code that bound
    ``jax.jit`` earlier (``from jax import jit``) is neither counted nor
    routed through stablejit.

    Arguments:
        mode: ``"off"`` — plain ``jax.jit``, only counted; ``"jit"`` —
            ``jax.jit`` becomes :func:`stablejit.stable_jit`; ``"patch"`` —
            :func:`stablejit.patch` (``jax.jit`` and ``jax.lax``'s loops).
            In every mode ``jax.jit`` and ``jax.lax``'s loops are thin
            counting wrappers whose ``__wrapped__`` is the function they
            stand for, and under ``"jit"`` and ``"patch"``
            ``stablejit.config.explain_misses`` is turned on (its log records
            are collected, not printed, unless it was on already) and the
            ``stablejit`` logger lets INFO records through to the census (a
            baked-in array is said at INFO), printing them only if it did
            before.

    Returns:
        None. Raises ``ValueError`` for an unknown mode, ``RuntimeError`` if
        the census was installed already.

    Example:
        >>> from stablejit import _census
        >>> _census.MODES
        ('off', 'jit', 'patch')
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if CENSUS.mode is not None:
        raise RuntimeError(f"the stablejit census is already installed (mode {CENSUS.mode!r})")
    CENSUS.mode = mode
    monitoring.register_event_duration_secs_listener(CENSUS.on_event)
    if mode == "jit":
        target = stable_jit
    else:
        if mode == "patch":
            patch()
        target = jax.jit
    jax.jit = _CountingJit(target)
    # After patch(): in patch mode the loops counted are stablejit's.
    for loop in _LOOPS:
        setattr(jax.lax, loop, _CountingLoop(loop, getattr(jax.lax, loop)))
    if mode != "off":
        CENSUS.show_retraces = config.explain_misses
        config.explain_misses = True
        logger = logging.getLogger("stablejit")
        if not logger.isEnabledFor(logging.INFO):
            CENSUS.show_info = False
            logger.setLevel(logging.INFO)
        logger.addFilter(RetraceFilter())


def installed() -> str | None:
    """The mode :func:`install` was called with, or None."""
    return CENSUS.mode
