"""``jax.lax`` control flow whose bodies compile once across redefinitions.

Eager ``lax.while_loop(cond_fn, body_fn, init)`` with fresh closures traces,
lowers and compiles the whole loop on every call. Each function here has the
signature and semantics of its ``jax.lax`` namesake, but runs one cached
program per *structure* of its function arguments (see :func:`stable_jit`):
their closed-over arrays are lifted to inputs, Python values they close over
and the static arguments (loop bounds given as Python ints, ``length``,
``reverse``, ``unroll``) are part of the key.

Only at the top level: inside any transformation (an outer ``jit``,
``make_jaxpr``, ``vmap``, ``grad``, a loop body), and for inputs ``lax``
rejects, each is exactly its ``jax.lax`` namesake, called as given (see
:mod:`._route`): JAX sees stock's program and raises stock's errors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._markers import sentinel
from ._originals import LAX
from ._route import avals, may_cache, scalar, scannable
from ._runtime.jitted import StableJitted, made
from ._runtime.options import DEFAULT_OPTIONS


def _run(runner: Callable, *static: Any) -> StableJitted:
    """``runner`` with ``static`` (functions and Python values) bound in: the
    cache key is theirs; the arguments of the call are the dynamic ones."""
    return made(functools.partial(runner, *static), DEFAULT_OPTIONS)


# The runners: each calls the real lax function (not a patched one), with the
# static arguments first, as _run binds them. Called directly, each is the
# plain lax call, which is what a wrapper makes where it may not cache.


def _while(cond_fun, body_fun, init_val):
    return LAX["while_loop"](cond_fun, body_fun, init_val)


def _fori(body_fun, unroll, lower, upper, init_val):
    kw = {} if unroll is None else {"unroll": unroll}
    return LAX["fori_loop"](lower, upper, body_fun, init_val, **kw)


def _scan(f, length, reverse, unroll, split_transpose, init, xs):
    return LAX["scan"](
        f, init, xs, length=length, reverse=reverse, unroll=unroll, _split_transpose=split_transpose
    )


def _cond(true_fun, false_fun, pred, *operands):
    return LAX["cond"](pred, true_fun, false_fun, *operands)


def _cond_legacy(true_fun, false_fun, pred, true_operand, false_operand):
    return LAX["cond"](pred, true_operand, true_fun, false_operand, false_fun)


def _switch(branches, index, *operands):
    return LAX["switch"](index, branches, *operands)


def _map(f, batch_size, xs):
    return LAX["map"](f, xs) if batch_size is None else LAX["map"](f, xs, batch_size=batch_size)


def _fori_static(lower, upper, body_fun, unroll, init_val):
    return _fori(body_fun, unroll, lower, upper, init_val)


for _runner, _name in (
    (_while, "while_loop"),
    (_fori, "fori_loop"),
    (_fori_static, "fori_loop"),
    (_scan, "scan"),
    (_cond, "cond"),
    (_cond_legacy, "cond"),
    (_switch, "switch"),
    (_map, "map"),
):
    _runner.stablejit_name = _name  # how messages name the loop (see the diagnostics' describe)


def _static_int(v) -> bool:
    # What lax.fori_loop takes as concrete bounds (and so turns into a scan).
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def while_loop(cond_fun: Callable, body_fun: Callable, init_val: Any) -> Any:
    """``jax.lax.while_loop``, compiled once per structure of its functions.

    Arguments:
        cond_fun: ``carry -> bool scalar``.
        body_fun: ``carry -> carry``.
        init_val: the initial carry (any pytree of arrays).

    Returns:
        The final carry, exactly as ``jax.lax.while_loop`` returns it.

    Example:
        >>> import jax.numpy as jnp, stablejit
        >>> def count_to(n, step):
        ...     return stablejit.while_loop(lambda i: i < n, lambda i: i + step, 0)
        >>> int(count_to(10, 3))   # both closures are new on every call
        12
    """
    if may_cache() and callable(cond_fun) and callable(body_fun) and avals(init_val) is not None:
        return _run(_while, cond_fun, body_fun)(init_val)
    return _while(cond_fun, body_fun, init_val)


def fori_loop(
    lower: Any, upper: Any, body_fun: Callable, init_val: Any, *, unroll: Any = None
) -> Any:
    """``jax.lax.fori_loop``, compiled once per structure of ``body_fun``.

    Python-int bounds are static, as for ``lax.fori_loop`` (so the loop is a
    ``scan`` and reverse-differentiable); array bounds are inputs.

    Arguments:
        lower: the first index (an int, or an integer scalar array).
        upper: the index to stop before.
        body_fun: ``(i, carry) -> carry``.
        init_val: the initial carry.
        unroll: as for ``jax.lax.fori_loop``.

    Returns:
        The final carry.

    Example:
        >>> import stablejit
        >>> int(stablejit.fori_loop(0, 4, lambda i, acc: acc + i, 0))
        6
    """
    if not (may_cache() and callable(body_fun) and _bounds(lower, upper, init_val)):
        return _fori(body_fun, unroll, lower, upper, init_val)
    if _static_int(lower) and _static_int(upper):
        return _run(_fori_static, lower, upper, body_fun, unroll)(init_val)
    return _run(_fori, body_fun, unroll)(lower, upper, init_val)


def _bounds(lower: Any, upper: Any, init_val: Any) -> bool:
    # lax's own checks on the bounds (equal types, integers) run inside the
    # cached trace, and name only dtypes: same message there.
    return scalar(lower, "iu") and scalar(upper, "iu") and avals(init_val) is not None


def scan(
    f: Callable,
    init: Any,
    xs: Any = None,
    length: int | None = None,
    reverse: bool = False,
    unroll: int | bool = 1,
    _split_transpose: bool = False,
) -> tuple[Any, Any]:
    """``jax.lax.scan``, compiled once per structure of ``f``.

    Arguments:
        f: ``(carry, x) -> (carry, y)``.
        init: the initial carry.
        xs: the values scanned over (a pytree of arrays with a leading axis), or None.
        length: as for ``jax.lax.scan``.
        reverse: as for ``jax.lax.scan``.
        unroll: as for ``jax.lax.scan``.
        _split_transpose: as for ``jax.lax.scan``.

    Returns:
        ``(final carry, stacked ys)``.

    Example:
        >>> import jax.numpy as jnp, stablejit
        >>> carry, ys = stablejit.scan(lambda c, x: (c + x, c * x), 0.0, jnp.arange(4.0))
        >>> float(carry), ys.tolist()
        (6.0, [0.0, 0.0, 2.0, 9.0])
    """
    if may_cache() and callable(f) and avals(init) is not None and scannable(xs, length):
        return _run(_scan, f, length, reverse, unroll, _split_transpose)(init, xs)
    return _scan(f, length, reverse, unroll, _split_transpose, init, xs)


_NO_OPERAND = sentinel("no operand")
"""Default of ``operand=``, which ``jax.lax`` keeps for an older calling convention."""


def _operands(operands: tuple, operand: Any) -> tuple | None:
    """``operands``, or ``(operand,)`` if given by keyword; None if both are
    given (an error ``jax.lax`` itself reports)."""
    if operand is _NO_OPERAND:
        return operands
    return None if operands else (operand,)


def cond(
    pred: Any, true_fun: Callable, false_fun: Callable, *operands: Any, operand: Any = _NO_OPERAND
) -> Any:
    """``jax.lax.cond``, compiled once per structure of its branches.

    Every calling convention of ``jax.lax.cond`` works: operands by position or
    one ``operand=`` by keyword, and the legacy five-argument form
    ``cond(pred, true_operand, true_fun, false_operand, false_fun)``.

    Arguments:
        pred: a boolean scalar.
        true_fun: the branch taken if ``pred`` is true, called with ``*operands``.
        false_fun: the other branch.
        operands: the branches' arguments.
        operand: a single operand, by keyword (instead of ``operands``).

    Returns:
        What the chosen branch returns.

    Example:
        >>> import stablejit
        >>> float(stablejit.cond(True, lambda x: x + 1.0, lambda x: x - 1.0, 1.0))
        2.0
        >>> float(stablejit.cond(False, 1.0, lambda x: x + 1.0, 5.0, lambda x: x - 1.0))
        4.0
    """
    ops = _operands(operands, operand)
    if ops is not None and may_cache() and scalar(pred, "biuf"):
        if callable(true_fun) and callable(false_fun) and avals(ops) is not None:
            return _run(_cond, true_fun, false_fun)(pred, *ops)
        legacy = len(operands) == 2 and callable(false_fun) and callable(operands[1])
        if legacy and avals((true_fun, operands[0])) is not None:
            # The legacy form: true_fun and operands[0] are the branches' operands.
            return _run(_cond_legacy, false_fun, operands[1])(pred, true_fun, operands[0])
    # Under a transformation, or input lax.cond may reject: lax.cond itself.
    return _lax_call("cond", (pred, true_fun, false_fun, *operands), operand)


def switch(
    index: Any, branches: Sequence[Callable], *operands: Any, operand: Any = _NO_OPERAND
) -> Any:
    """``jax.lax.switch``, compiled once per structure of its branches.

    Arguments:
        index: an integer scalar, clamped into range as by ``jax.lax.switch``.
        branches: the functions to choose from, called with ``*operands``.
        operands: the branches' arguments.
        operand: a single operand, by keyword (instead of ``operands``).

    Returns:
        What the chosen branch returns.

    Example:
        >>> import stablejit
        >>> float(stablejit.switch(1, [lambda x: x, lambda x: 2 * x], 3.0))
        6.0
    """
    ops = _operands(operands, operand)
    if ops is not None and may_cache() and scalar(index, "iu") and avals(ops) is not None:
        # A list or tuple only: lax reads other iterables twice (an iterator
        # comes out empty), and its errors for them are its own.
        if isinstance(branches, (list, tuple)) and branches and all(callable(b) for b in branches):
            return _run(_switch, tuple(branches))(index, *ops)
    # Under a transformation, or input lax.switch may reject: lax.switch itself.
    return _lax_call("switch", (index, branches, *operands), operand)


def _lax_call(name: str, args: tuple, operand: Any) -> Any:
    """Calls the real ``jax.lax`` function with the arguments as given, so
    that what JAX sees, and any error, is exactly its own."""
    if operand is _NO_OPERAND:
        return LAX[name](*args)
    return LAX[name](*args, operand=operand)


def map(f: Callable, xs: Any, *, batch_size: int | None = None) -> Any:  # noqa: A001
    """``jax.lax.map``, compiled once per structure of ``f``.

    Arguments:
        f: applied to each slice of ``xs`` along its leading axis.
        xs: a pytree of arrays.
        batch_size: as for ``jax.lax.map`` (static).

    Returns:
        The stacked results.

    Example:
        >>> import jax.numpy as jnp, stablejit
        >>> stablejit.map(lambda x: x * 2, jnp.arange(3)).tolist()
        [0, 2, 4]
    """
    if may_cache() and callable(f) and scannable(xs, None):
        return _run(_map, f, batch_size)(xs)
    return _map(f, batch_size, xs)
