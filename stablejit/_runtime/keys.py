"""A call's cache key: how it is built from the fingerprint, and read back.

A key is ``(options, [number of arguments], [baked], fingerprint)``: the
options' key (or their static-scalars key, see ``lift_scalars``), the number
of arguments when one sharding is broadcast over them, which leaves are baked
in (see the fingerprint's ``bake``), and the callable's fingerprint. Only
this module builds or takes apart keys.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any

from .._diagnostics.describe import callables_in, user_function
from .._fingerprint import bake
from .._fingerprint.code import code_info
from .._fingerprint.walk import KeyWalker, walker
from .._markers import sentinel
from .cache import STATIC_SCALARS
from .options import Lift, Options


class Unkeyable(Exception):
    """What a callable reaches cannot be walked: nested deeper than Python's
    recursion limit allows (a structure that grows with every call), or
    changing while it is walked, walk after walk."""


def _walk(make_walker, subject) -> tuple[Any, list]:
    """The key and leaves of ``subject``, by a fresh walker of ``make_walker``.

    A dict or set that changes while it is walked (another thread, or a
    pytree whose flattening sets up state lazily) gets one more walk, over
    the settled state; one that changes on every walk (a cache the walk
    itself fills) cannot be keyed.
    """
    for attempt in (0, 1):
        w = make_walker()
        try:
            return w.walk(subject), w.leaves
        except RuntimeError as e:
            if isinstance(e, RecursionError):
                raise Unkeyable(str(e)) from e
            if "changed" not in str(e) or "during iteration" not in str(e):
                raise
            if attempt:
                raise Unkeyable(str(e)) from e
    raise AssertionError("unreachable")


def call_key(opts: Options, subject, n_args: int, static_scalars: bool = False):
    """``(key, leaves)`` of a call of ``subject`` with ``n_args`` positional
    arguments (``static_scalars``: key Python numbers statically even under
    ``lift_scalars``). Raises :class:`Unkeyable`."""
    head = opts.key
    if opts.lift is None or static_scalars:
        if static_scalars:
            head = opts.static_key
        fkey, leaves = _walk(KeyWalker, subject)
    else:
        fkey, leaves = _walk(functools.partial(walker, opts.lift), subject)
        if (head, fkey) in STATIC_SCALARS:
            # This variant failed to trace with its scalars lifted.
            head = opts.static_key
            fkey, leaves = _walk(KeyWalker, subject)
    baked, leaves = bake.split((head, fkey), leaves)
    key = (head, n_args, fkey) if opts.broadcast_in_shardings else (head, fkey)
    if baked is not None:
        key = (*key[:-1], baked, fkey)
    return key, leaves


def fingerprint_of(key):
    """The callable's fingerprint in ``key``."""
    return key[-1]


def variant_of(key) -> tuple:
    """``(options, fingerprint)``: what lift_scalars and baking decisions are
    filed under."""
    return (key[0], key[-1])


def is_plain(key) -> bool:
    """Whether ``key`` is options and fingerprint only (nothing baked, no
    argument count): the keys a fast-path record may stand for."""
    return len(key) == 2


def lift_of(opts: Options, key) -> Lift:
    """How the leaves of ``key`` were collected."""
    return opts.lift if key[0] is opts.key else None


def baked_of(key) -> bake.Baked | None:
    """Which leaves of ``key`` are baked in."""
    return key[-2] if len(key) > 2 and type(key[-2]) is bake.Baked else None


def signature(fn, n_leaves: int):
    """``fn``'s signature behind ``n_leaves`` positional-only leaf parameters
    (JAX resolves ``static_argnames`` through it)."""
    try:
        sig = inspect.signature(fn)
    except Exception:  # noqa: BLE001 - inspect runs user __eq__ on callable objects
        return None
    kind = inspect.Parameter.POSITIONAL_ONLY
    leaves = [inspect.Parameter(bake.LEAF_NAME.format(i), kind) for i in range(n_leaves)]
    # Defaults marked, not kept: the entry outlives fn, and a partial's are its
    # bound values (arrays); JAX binds arguments to read their names only.
    params = [
        p if p.default is p.empty else p.replace(default=_DEFAULT) for p in sig.parameters.values()
    ]
    try:
        return sig.replace(parameters=[*leaves, *params])
    except ValueError:
        return None


_DEFAULT = sentinel("a default")


def tag(fn):
    """What identifies "this function" across redefinitions (for clear_cache,
    counters and the recompile limit): its code, or for a partial (a loop's
    bound functions) the code of it and of the functions it binds."""
    fn = user_function(fn)  # jax.grad(loss) is loss's, not jax's wrapper's
    if isinstance(fn, functools.partial):
        return (tag(fn.func), *(tag(a) for a in callables_in(fn.args)))
    code = getattr(fn, "__code__", None)
    return code_info(code).digest if isinstance(code, types.CodeType) else type(fn)
