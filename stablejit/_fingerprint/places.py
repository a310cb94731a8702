"""The places a value can be held in, for substituting it in place at trace time.

Each is read, written and named the same way whatever holds it; see
``rebuild.Rebuilder.put``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class RebuildMismatch(RuntimeError):
    """The leaves cannot be put back where the key walk took them: the rebuild
    walk met other values than the walk it replays (see
    ``rebuild.substitute``), or this JAX cannot rebuild what holds them. The
    runtime then runs the call as ``jax.jit`` would."""


class Place(NamedTuple):
    """How to read, write and name one kind of place that holds a value."""

    get: Callable[[Any, Any], Any]
    set: Callable[[Any, Any, Any], None]
    describe: Callable[[Any, Any], str]


def _set_cell(cell, _, value):
    cell.cell_contents = value


ITEM = Place(
    lambda c, k: dict.__getitem__(c, k) if isinstance(c, dict) else list.__getitem__(c, k),
    lambda c, k, v: list.__setitem__(c, k, v) if isinstance(c, list) else dict.__setitem__(c, k, v),
    lambda c, k: f"item {k!r} of a {type(c).__qualname__}",
)
"""An item of a list or dict (their own methods, not a subclass's)."""
GLOBAL = Place(dict.__getitem__, dict.__setitem__, lambda g, k: f"the global {k!r}")
"""A name in a module's namespace (its ``__dict__``)."""
ATTR = Place(
    getattr,
    object.__setattr__,
    lambda o, k: f"{type(o).__qualname__}.{k}",
)
"""An attribute kept in a slot (``__slots__``)."""
CELL = Place(
    lambda c, _: c.cell_contents,
    _set_cell,
    lambda c, k: f"the closure variable {k!r}",
)
"""A closure cell; the key is the variable's name, for messages."""
