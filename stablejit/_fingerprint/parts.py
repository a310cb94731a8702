"""A function's children, in the one order every walk of it follows.

Keying, describing, rebuilding, the fast path's records and side-channel
snapshots all visit a function's parts through :func:`places`, so they agree
on the order, on what is skipped, and on where each part lives.
"""

from __future__ import annotations

import functools
import types
from typing import Any

from .._markers import sentinel
from .code import CodeInfo, is_library_file
from .kind import MISSING
from .sinks import sink_of

DEFAULTS = sentinel("defaults")
KWDEFAULTS = sentinel("kwdefaults")
GLOBAL = sentinel("global")
CHAIN = sentinel("attribute chain")
CELL = sentinel("cell")
ATTRIBUTES = sentinel("function attributes")
SUNK = sentinel("side channel")
"""The value of a place that is a side channel: keyed by identity, never walked."""

Place = tuple[Any, Any, Any, Any]
"""``(what, name, holder, value)``:

* ``DEFAULTS``/``KWDEFAULTS``/``ATTRIBUTES``: ``fn.__defaults__``,
  ``fn.__kwdefaults__``, ``fn.__dict__`` (name and holder None); present only
  when set (a ``__dict__`` when not empty);
* ``GLOBAL``: a global the code reads; holder: the dict it is read from (the
  function's globals, or its builtins for a name only they define);
* ``CHAIN``: ``config.SCALE`` through a user module; name: the chain,
  holder: ``(root module, depth)`` (see :func:`resolve_chain`);
* ``CELL``: a closure variable; holder: its cell.

A side channel's value is :data:`SUNK`.
"""


def module_is_library(mod: types.ModuleType) -> bool:
    f = getattr(mod, "__file__", None)
    return f is None or is_library_file(f)


def resolve_chain(root, chain) -> tuple[int, Any]:
    """Follows ``config.SCALE``-style chains through user modules.

    Returns ``(depth, value)``: ``value`` is the first non-module object (or
    a library module) reached after ``depth`` attribute steps.
    """
    v = root
    depth = 0
    for attr in chain[1:]:
        if not isinstance(v, types.ModuleType) or module_is_library(v):
            break
        v = getattr(v, attr, MISSING)
        depth += 1
    return depth, v


def chain_owner(root, chain, depth: int) -> dict:
    """The namespace holding the value a chain resolved to."""
    return functools.reduce(getattr, chain[1:depth], root).__dict__


def places(fn: types.FunctionType, info: CodeInfo, w) -> list[Place]:
    """``fn``'s children in walk order: defaults, keyword defaults, each
    global read, each attribute chain through a user module, each closure
    cell, then ``__dict__`` (``w``: the walk, for its side channels)."""
    # Written for speed: this runs for every function a full walk keys.
    out: list[Place] = []
    if fn.__defaults__ is not None:
        out.append((DEFAULTS, None, None, fn.__defaults__))
    if fn.__kwdefaults__ is not None:
        out.append((KWDEFAULTS, None, None, fn.__kwdefaults__))
    g = fn.__globals__
    sinks = w.sinks
    gskip = sink_of(w, g) if sinks else False
    for name in info.global_names:
        if gskip and name in gskip:
            out.append((GLOBAL, name, g, SUNK))
            continue
        v = g.get(name, MISSING)
        if v is MISSING:
            b = fn.__builtins__
            v = b.get(name, MISSING)
            out.append((GLOBAL, name, g if v is MISSING else b, v))
        else:
            out.append((GLOBAL, name, g, v))
    if info.attr_chains:
        for chain in info.attr_chains:
            root = g.get(chain[0], MISSING)
            if isinstance(root, types.ModuleType) and not module_is_library(root):
                depth, v = resolve_chain(root, chain)
                out.append((CHAIN, chain, (root, depth), v))
    closure = fn.__closure__
    if closure is not None:
        for name, cell in zip(info.free_names, closure):  # noqa: B905 - equal by construction
            if sinks and sink_of(w, cell) is not False:
                out.append((CELL, name, cell, SUNK))
                continue
            try:
                v = cell.cell_contents
            except ValueError:
                v = MISSING
            out.append((CELL, name, cell, v))
    if fn.__dict__:
        out.append((ATTRIBUTES, None, None, fn.__dict__))
    return out
