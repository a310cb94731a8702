"""The census's modes: what ``install`` swaps in for ``jax.jit``, and how it listens.

The census has to see every ``jax.jit`` the program makes, so it replaces
``jax.jit`` itself with a thin counting wrapper, before the program is
imported; the mode decides what that wrapper stands for (plain ``jax.jit``,
``stable_jit``, or stablejit's patch). Installing is kept apart from the
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
from .._runtime.api import stable_jit
from .counts import CENSUS
from .messages import RetraceFilter

MODES = ("off", "jit", "patch")


def _counting(target: Any) -> Any:
    """``target`` (a ``jax.jit``), counting what it is called on."""

    @functools.wraps(target)
    def jit(*args: Any, **kwargs: Any) -> Any:
        if not args:
            # The decorator factory (``@jax.jit(static_argnums=...)``): let
            # ``target`` check the options, count when it is applied.
            target(**kwargs)
            return functools.partial(jit, **kwargs)
        CENSUS.note(args[0])
        return target(*args, **kwargs)

    return jit


def install(mode: str) -> None:
    """Starts the census for this process, in one of three modes.

    Call it before the code under test is imported: code that bound
    ``jax.jit`` earlier (``from jax import jit``) is neither counted nor
    routed through stablejit.

    Arguments:
        mode: ``"off"`` — plain ``jax.jit``, only counted; ``"jit"`` —
            ``jax.jit`` becomes :func:`stablejit.stable_jit`; ``"patch"`` —
            :func:`stablejit.patch` (``jax.jit`` and ``jax.lax``'s loops).
            In every mode ``jax.jit`` is a thin counting wrapper whose
            ``__wrapped__`` is the function it stands for, and under ``"jit"``
            and ``"patch"`` ``stablejit.config.explain_misses`` is turned on
            (its log records are collected, not printed, unless it was on
            already).

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
    jax.jit = _counting(target)
    if mode != "off":
        CENSUS.show_retraces = config.explain_misses
        config.explain_misses = True
        logging.getLogger("stablejit").addFilter(RetraceFilter())


def installed() -> str | None:
    """The mode :func:`install` was called with, or None."""
    return CENSUS.mode
