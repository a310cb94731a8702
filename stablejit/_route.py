"""Whether a loop call may take stablejit's cache, or must be exactly ``jax.lax``.

The loop wrappers (see :mod:`._loops`) save a compile for an *eager* loop
given fresh closures: they hand JAX a cached ``jit`` of the loop instead of
the loop itself. Anywhere else that swap only changes what JAX sees:

* under a staging trace (``jit``, ``make_jaxpr``, a loop body, ``checkpoint``)
  the outer program is compiled once, so there is nothing to save;
* under an eager transformation (``vmap``, ``grad``, ``jvp``, ``shard_map``)
  the transformation would see a ``jit`` where it sees ``while``/``cond``/
  ``scan``, and lose the rules it has for those (scan's loop-invariant carry,
  cond's forwarding of unchanged operands): ``vmap(..., out_axes=None)`` of a
  cond that returns an unbatched operand then fails where stock runs;
* under ``jax.disable_jit()`` lax runs the loop in Python, compiling nothing.

So the one decision, :func:`may_cache`, reads JAX's own trace context: only
the top level (JAX's eval trace, no named axes, jit enabled) caches.

The argument checks below say whether ``jax.lax`` takes a call's dynamic
inputs as they are; a wrapper sends any call that fails them straight to
``jax.lax``, so bad input gets lax's own exception before anything is
wrapped (a cached ``jit`` would first turn the input into a tracer, or
reject it with an error of its own). They never raise or word an error.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax._src import config as _jax_config
from jax._src import core as _core
from jax._src import dtypes as _dtypes
from jax._src.array import ArrayImpl as _ArrayImpl
from jax._src.interpreters import partial_eval as _pe

_STRING = getattr(_dtypes, "string_dtype", None)  # JAX's string arrays (0.7 on)

TOP = "top"
"""Not under any transformation: the only place the wrappers cache."""
STAGING = "staging"
"""Under a trace that builds a jaxpr (``jit``, ``make_jaxpr``, loop bodies):
compiled once with the outer program."""
EAGER = "eager"
"""Under eager transformations only (``vmap``, ``grad``, ``jvp``,
``shard_map`` called outside any ``jit``)."""


def enclosing() -> str:
    """Which of :data:`TOP`, :data:`STAGING` or :data:`EAGER` encloses the
    caller, read from JAX's trace context (the current trace and its named
    axes), as JAX itself reads it."""
    ctx = _core.trace_ctx
    trace = ctx.trace
    if isinstance(trace, _core.EvalTrace) and not ctx.axis_env.axis_sizes:
        return TOP
    # Transformations stack their traces through ``parent_trace`` (a
    # ``jit`` inside a ``vmap``, a ``vmap`` inside a ``jit``); any trace that
    # builds a jaxpr makes the whole stack one staged program.
    while trace is not None:
        if isinstance(trace, _pe.DynamicJaxprTrace):
            return STAGING
        trace = getattr(trace, "parent_trace", None)
    return EAGER


def may_cache() -> bool:
    """Whether a loop called here may run a cached program instead of lax's."""
    return enclosing() == TOP and not _jax_config.disable_jit.value


# --- the dynamic inputs lax takes as they are ---------------------------------------------------


def avals(tree: Any) -> list | None:
    """The JAX types of ``tree``'s leaves, or None where lax would reject one
    (not an array or a Python number, a string array, an int out of range)
    or where a leaf is a tracer (at the top level, one that escaped a trace:
    lax's own error says so)."""
    out = []
    for leaf in jax.tree_util.tree_leaves(tree):
        aval = _aval(leaf)
        if aval is None:
            return None
        out.append(aval)
    return out


def _aval(leaf: Any) -> Any:
    if type(leaf) is _ArrayImpl:
        return leaf.aval  # a concrete array, the common case: valid, and cheap to ask
    if isinstance(leaf, _core.Tracer):
        return None
    try:
        aval = _core.typeof(leaf)  # JAX's own test of "a valid JAX type"
    except (TypeError, OverflowError, ValueError):
        return None
    # As JAX's valid_jaxtype: its own string dtype has a type, yet is no value lax takes.
    dtype = getattr(aval, "dtype", None)
    if dtype is None or (_STRING is not None and dtype == _STRING):
        return None
    return aval


def scalar(x: Any, kinds: str) -> bool:
    """Whether ``x`` is one scalar whose dtype kind is one of ``kinds``, as
    ``cond``'s predicate (``"biuf"``) or ``switch``'s index (``"iu"``) must be."""
    aval = _aval(x)
    return aval is not None and aval.shape == () and aval.dtype.kind in kinds


def scannable(xs: Any, length: Any) -> bool:
    """Whether ``scan`` takes ``xs`` and ``length`` as they are: arrays with
    one leading axis size, which ``length`` (a non-negative int) matches if
    given; with no arrays, ``length`` is required."""
    types = avals(xs)
    if types is None or any(not t.shape for t in types):
        return False
    sizes = {t.shape[0] for t in types}
    if length is None:
        return len(sizes) == 1
    if not isinstance(length, (int, np.integer)) or isinstance(length, bool) or length < 0:
        return False
    return sizes <= {length}
