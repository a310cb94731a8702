"""Why did it recompile? Miss explanations and the recompile limit.

Runs on cache misses and retraces only. Messages go to the ``stablejit``
logger: explanations when ``config.explain_misses`` is on, and, past the
recompile limit, one notice saying what keeps changing (or, as chosen by
``config.on_recompile_limit``, a Python warning or an exception).

Why a log record by default, not a warning: test suites run with warnings
turned into errors (numpyro's, under ``-W error`` or ``filterwarnings =
error``), so a warning about code that runs correctly fails them, where
``jax.jit`` would have passed. A ``logging`` warning with no handler
configured still reaches stderr through Python's last-resort handler, as
JAX's own cache-miss explanations do.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import warnings
import weakref

import jax

from .._config import config
from . import stats
from .describe import SIDE_CHANNEL, describe, differences, distance, render, structure
from .stats import Stats

logger = logging.getLogger("stablejit")

_MAX_VALUES = 32  # distinct summaries remembered per part


class RecompileLimitError(RuntimeError):
    """A function compiled more distinct variants than ``config.recompile_limit``.

    Raised when ``config.on_recompile_limit == "raise"``.

    Example:
        >>> import jax.numpy as jnp, stablejit
        >>> stablejit.config.on_recompile_limit = "raise"
        >>> def scaled(k):
        ...     return stablejit.stable_jit(lambda x: x * k)
        >>> try:
        ...     for k in range(20):
        ...         _ = scaled(float(k))(jnp.ones(1))
        ... except stablejit.RecompileLimitError as e:
        ...     print(str(e).split(" at ")[0])
        stable_jit(scaled.<locals>.<lambda>)
        >>> stablejit.config.on_recompile_limit = "log"
    """


class RecompileLimitWarning(UserWarning):
    """A function compiled more distinct variants than ``config.recompile_limit``.

    Warned once per function when ``config.on_recompile_limit == "warn"``,
    naming what keeps changing. The default, ``"log"``, says the same through
    the ``stablejit`` logger instead.

    Example:
        >>> import warnings, jax.numpy as jnp, stablejit
        >>> stablejit.config.on_recompile_limit = "warn"
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     for k in range(10):
        ...         _ = stablejit.stable_jit(lambda x, k=float(k): x * k)(jnp.ones(1))
        >>> caught[0].category.__name__
        'RecompileLimitWarning'
        >>> stablejit.config.on_recompile_limit = "log"
    """


def on_new_key(stats: Stats, fn, key) -> bool:
    """Records a miss of ``fn`` for ``key``; False if it must not be cached.

    Logs the explanation (if enabled) and applies the recompile limit.
    """
    stats.misses += 1
    desc = describe(fn)
    if config.explain_misses and stats.descriptions:
        # The most recent of the nearest: min() keeps the first of equals.
        nearest = min(reversed(stats.descriptions), key=lambda old: distance(old, desc))
        reasons = differences(nearest, desc) or ["a part compared by identity changed"]
        logger.warning(
            "stable_jit(%s)%s retraced: %s", stats.name, stats.location, "; ".join(reasons)
        )
    stats.descriptions.append(desc)
    for r in desc.rows:
        # A trace counter turns into a side channel once; it is not something
        # that keeps changing.
        if not r.lifted and r.summary != SIDE_CHANNEL:
            seen = stats.values.setdefault(render(r.path), {})
            if len(seen) < _MAX_VALUES:
                seen[r.summary] = None
    # Distinct callables meeting one shared piece of code (a library's loop
    # body over each caller's model) are distinct functions, not one
    # function recompiling: the limit counts keys of one structure only.
    group = stats.keys.setdefault(structure(desc), set())
    group.add(hash(key))
    if len(group) <= config.recompile_limit:
        return True
    stance = config.on_recompile_limit
    message = _limit_message(stats, stance, len(group))
    if stance == "raise":
        raise RecompileLimitError(message)
    if not stats.warned:
        stats.warned = True
        if stance == "warn":
            warnings.warn(message, RecompileLimitWarning, stacklevel=_user_stacklevel())
        else:
            logger.warning("%s", message)
    return stance != "fallback"


def wrote_side_channels(stats: Stats, fn) -> None:
    """After a trace of ``fn`` made side channels of lists, cells or globals
    it wrote: its description (the newest, made at its miss) is made again,
    as later misses are explained against. Described before the trace, by
    their contents, the side channels read like another function's fresh
    ones, and a miss for those (see the runtime's
    ``canonical._refile_after_trace``) would show no difference."""
    if config.explain_misses and stats.descriptions:
        stats.descriptions[-1] = describe(fn)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_stacklevel() -> int:
    """The stacklevel of the first caller outside stablejit (and JAX)."""
    frame, level = sys._getframe(1), 1
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE_DIR) and "/jax/" not in path:
            return level
        frame, level = frame.f_back, level + 1
    return 1


def _limit_message(stats: Stats, stance: str, variants: int) -> str:
    changing = sorted(
        ((name, list(vals)) for name, vals in stats.values.items() if len(vals) > 1),
        key=lambda item: -len(item[1]),
    )
    head = (
        f"stable_jit({stats.name}){stats.location} has compiled {variants} distinct "
        f"variants (config.recompile_limit={config.recompile_limit})."
    )
    if not changing:
        what = " Its parts keyed by identity keep changing."
    else:
        what = " What keeps changing: " + "; ".join(
            f"{name} took {len(vals)}{'+' if len(vals) >= _MAX_VALUES else ''} distinct values "
            f"({', '.join(vals[:4])}{', …' if len(vals) > 4 else ''}){_hint(vals)}"
            for name, vals in changing[:3]
        )
    tail = {
        "log": " Later variants are still compiled and cached.",
        "warn": " Later variants are still compiled and cached.",
        "fallback": " Later new variants run through a plain jax.jit, uncached.",
        "raise": "",
    }[stance]
    return head + what + "." + tail


def _hint(values: list[str]) -> str:
    try:
        [float(v) for v in values]
    except ValueError:
        return ""
    return "; make it an array, or pass lift_scalars=True, to lift it"


def _summary(tree) -> str:
    text = str(jax.tree_util.tree_map(lambda x: _aval_or_value(x), tree))
    return text if len(text) <= 200 else text[:199] + "…"


def _aval_or_value(x):
    aval = getattr(x, "aval", None)
    if aval is None or not hasattr(aval, "str_short"):
        return x
    # JAX's own mark of a weak type ("~float32[2]", as ``str(aval)`` shows it): JAX keys a
    # trace on it, and without it a retrace on weak type alone would show two equal types.
    return ("~" if getattr(aval, "weak_type", False) else "") + aval.str_short()


def signature(leaves, args, kwargs) -> tuple:
    """What JAX keys a trace on, printable: the shapes of lifted arrays and
    arguments, the values of static arguments."""
    return (
        tuple(_summary(x) for x in leaves),
        tuple(_summary(a) for a in args),
        {k: _summary(v) for k, v in kwargs.items()},
    )


_POSITIONAL_NAMES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""entry → the names of its callable's positional parameters, noted at its first trace."""


def _change(what: str, old, new) -> str:
    """``what: old → new``, saying what ``~`` means where a weak type is part of the change.

    The note is part of the one change, not a reason of its own: the census splits reasons
    on "; " and counts each."""
    text = f"{what}: {old} → {new}"
    if "~" in str(old) + str(new):
        text += " (~: a weak type, as of an array made from a Python scalar)"
    return text


def _positional_names(entry) -> list[str]:
    """The names of the positional parameters of the callable ``entry`` was made for, as the
    user calls it (static arguments keep their places): noted at the entry's first trace,
    while that callable is alive (a redefined closure's retraces come from later ones, after
    it may be gone); none where it has no signature."""
    names = _POSITIONAL_NAMES.get(entry)
    if names is None:
        names = _POSITIONAL_NAMES[entry] = _parameters_of(entry)
    return names


def _parameters_of(entry) -> list[str]:
    owner = entry.policy.owner() if entry.policy.owner is not None else None
    if owner is None:
        return []
    try:
        params = inspect.signature(owner).parameters.values()
    except Exception:  # noqa: BLE001 - inspect compares callable objects with their own __eq__
        return []
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in params if p.kind in positional]


def on_retrace(entry, name: str, location: str, signature: tuple) -> None:
    """Explains a retrace within one entry: the arguments' shapes changed."""
    old = stats.new_signature(entry, signature)
    if not config.explain_misses:
        return
    if old is None:
        _positional_names(entry)  # while the callable it was made for is alive
        return
    labels = entry.counts.leaf_labels
    changes = []
    for i, (a, b) in enumerate(zip(old[0], signature[0], strict=False)):
        if a != b:
            what = labels[i] if i < len(labels) else f"lifted array {i}"
            changes.append(_change(what, a, b))
    names = _positional_names(entry)
    for i, (a, b) in enumerate(zip(old[1], signature[1], strict=False)):
        if a != b:
            named = f" ({names[i]!r})" if i < len(names) else ""
            changes.append(_change(f"argument {i}{named}", a, b))
    if len(old[1]) != len(signature[1]):
        changes.append(f"{len(old[1])} → {len(signature[1])} positional arguments")
    for k in sorted(old[2].keys() | signature[2].keys()):
        a, b = old[2].get(k), signature[2].get(k)
        if a != b:
            changes.append(_change(f"keyword argument {k!r}", a, b))
    # The signature holds what the tracers' avals show (shape, dtype, weak type), not the
    # shardings of the arrays passed in.
    reasons = changes or [
        "the shapes, dtypes and weak types of every argument and lifted array are unchanged: "
        "their shardings (or another property jax.jit keys on) changed"
    ]
    logger.warning("stable_jit(%s)%s retraced: %s", name, location, "; ".join(reasons))
