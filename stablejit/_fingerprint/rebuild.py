"""Back from (static key, leaves) to the callable, at trace time.

A :class:`Plan` is a key walk that records the tree of its visits; a
:class:`Rebuilder` replays it over the callable, putting each leaf's
substitute (a tracer) where the walk found the leaf and keeping every
leaf-free object as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from jax import core

from . import bake
from .classify import classify
from .kind import KEYS, TABLE
from .places import Place, RebuildMismatch
from .walk import KeyWalker, Lift, Visits, key_of

_LOG = logging.getLogger("stablejit")


class Plan(KeyWalker):
    """A key walk that also records, per visited value, the tree of visits.

    ``has_leaf[i]`` says whether visit ``i`` must be rebuilt: its subtree holds
    a leaf, or refers back to a value that does. ``end[i]`` is the visit after
    its subtree, so a rebuild can skip leaf-free subtrees; ``leaf_end[i]``
    the number of leaves taken up to there; ``type_of[i]`` the type of the
    value visited, which the rebuild must meet there too.
    """

    __slots__ = (
        "has_leaf",
        "end",
        "leaf_end",
        "type_of",
        "parent",
        "children",
        "is_ref",
        "_visit_of",
        "_cur",
        "_refs",
    )

    exact = False

    def __init__(self, fn, lift: Lift = None):
        super().__init__(lift)
        self.has_leaf: list[bool] = []
        self.end: list[int] = []
        self.leaf_end: list[int] = []
        self.type_of: list[type] = []
        self.parent: list[int] = []
        self.is_ref: list[bool] = []
        self._visit_of: list[int] = []  # cyclic node number -> visit index
        self._refs: list[tuple[int, int]] = []
        self._cur = -1
        self.seen = Visits(self._on_first, self._on_ref)
        self.walk(fn)
        self._propagate()
        # The walk is over: drop its visit table, whose callbacks are this
        # plan's own methods. The cycle would keep every value the walk met
        # (the user's arrays among them) alive until a garbage collection.
        self.seen = {}
        self.alive = []
        self.children: list[list[int]] = [[] for _ in self.parent]
        for i, p in enumerate(self.parent):
            if p >= 0:
                self.children[p].append(i)

    def walk(self, v):
        i = len(self.parent)
        self.parent.append(self._cur)
        self.has_leaf.append(False)
        self.end.append(0)
        self.leaf_end.append(0)
        self.type_of.append(type(v))
        self.is_ref.append(False)
        n_leaves = len(self.leaves)
        outer, self._cur = self._cur, i
        try:
            # KeyWalker.walk, inlined: a frame per level more than the key
            # walk would make a structure that keyed fine too deep here.
            return (KEYS.get(type(v)) or key_of(v))(self, v)
        finally:
            self._cur = outer
            self.end[i] = len(self.parent)
            self.leaf_end[i] = len(self.leaves)
            if len(self.leaves) > n_leaves:
                self._mark(i)

    def _on_first(self, _):
        self._visit_of.append(self._cur)

    def _on_ref(self, ref):
        self.is_ref[self._cur] = True
        self._refs.append((self._cur, self._visit_of[ref]))

    def _mark(self, i):
        has_leaf, parent = self.has_leaf, self.parent
        while i >= 0 and not has_leaf[i]:
            has_leaf[i] = True
            i = parent[i]

    def _propagate(self):
        # A value that refers back to a rebuilt value must be rebuilt too,
        # or it would keep the original (concrete) arrays reachable.
        changed = True
        while changed:
            changed = False
            for i, target in self._refs:
                if self.has_leaf[target] and not self.has_leaf[i]:
                    self._mark(i)
                    changed = True


class Rebuilder:
    """Replays a :class:`Plan` over a callable, substituting leaves.

    Two ways, by ``in_place``:

    * At trace time (``in_place=True``) the traced code must see the
      program's own objects, as under ``jax.jit``: libraries keep state in
      them (numpyro's handler stack, a ``self.count``) and compare them by
      identity. Mutable holders — lists, dicts, objects' attributes, closure
      cells, module globals — get the substitutes *in place*, recorded, and
      :meth:`restore` puts the arrays back after the trace. Immutable holders
      (tuples, pytree nodes, partials, bound methods) are copied around
      their substitutes, and functions are copied too, over the very cells
      and globals dict: JAX caches traces by function object, so a function
      seen with other substitutes must be a new object to JAX.
    * Otherwise (a :func:`~stablejit.stable` skeleton, which outlives any
      trace) every holder of a leaf is copied and the originals are left
      untouched.
    """

    __slots__ = (
        "plan",
        "leaves",
        "pos",
        "leaf_pos",
        "memo",
        "sinks",
        "in_place",
        "swaps",
        "placed",
        "copies",
    )

    def __init__(self, plan: Plan, leaves, in_place: bool = False):
        self.plan = plan
        self.sinks = plan.sinks
        self.leaves = leaves
        self.pos = 0
        self.leaf_pos = 0
        self.memo: dict[int, Any] = {}
        self.in_place = in_place
        self.swaps: list[tuple] = []
        self.placed: set[int] = set()  # ids of the substitutes put (swaps keeps them)
        self.copies: list[tuple[Any, Any, Any]] = []

    def copied(self, items, current: Callable[[Any], Any], where: Callable[[Any], str]) -> None:
        """At trace time, records the substitutes among ``items`` (``(key,
        value)`` pairs of a copy of an immutable holder, such as a pytree
        node), for :meth:`check_writes`: ``current(key)`` reads the copy's
        value then, ``where(key)`` names it."""
        if not self.in_place:
            return
        lifted = [(k, v) for k, v in items if isinstance(v, core.Tracer)]
        if lifted:
            self.copies.append((lifted, current, where))

    def check_writes(self) -> None:
        """Refuses a state update that reached only a copy (a pytree node's,
        such as an ``nnx`` module's RNG count or batch statistics): it would
        be lost, and later calls would repeat the old state. ``jax.jit``
        refuses those too (nnx raises its TraceContextError)."""
        for lifted, current, where in self.copies:
            for k, was in lifted:
                if current(k) is not was:
                    raise TypeError(
                        f"the traced function replaced {where(k)}, an array stablejit lifts "
                        "to an input, inside a copy stablejit made of an immutable pytree: "
                        "the update cannot reach your object. Return the new value instead."
                    )

    def put(self, place: Place, target, key, value) -> None:
        """Sets ``target``'s ``key`` to ``value`` through ``place``, to be
        undone by :meth:`restore`."""
        self.swaps.append((place, target, key, place.get(target, key), value))
        self.placed.add(id(value))
        place.set(target, key, value)

    def restore(self) -> None:
        """Puts back what :meth:`put` replaced, latest first.

        A place the traced code rebound keeps the new value, as under
        ``jax.jit``, unless that value is traced: a tracer left in the
        program's objects would leak (``jax.jit`` leaks it), so the array is
        put back and the update is dropped, with a log line naming it.
        """
        for place, target, key, old, placed in reversed(self.swaps):
            try:
                now = place.get(target, key)
            except (KeyError, AttributeError, ValueError):
                continue  # deleted by the traced code: as under jax.jit
            if now is placed:
                place.set(target, key, old)
            elif isinstance(now, core.Tracer):
                place.set(target, key, old)
                _LOG.info(
                    "the traced function replaced %s, an array stablejit lifts to an "
                    "input, with a traced value: the update is dropped (under jax.jit "
                    "the tracer would leak into your object); return the new value instead",
                    place.describe(target, key),
                )
        self.swaps.clear()
        self.placed.clear()

    def next_leaf(self):
        leaf = self.leaves[self.leaf_pos]
        self.leaf_pos += 1
        return leaf

    def walk(self, v):
        i = self.pos
        plan = self.plan
        if not plan.has_leaf[i]:
            self.pos = plan.end[i]
            return v
        if id(v) in self.placed:
            # A place read twice (a global that two functions of one module
            # read) holds the substitute put there at its first read: the key
            # walk saw the original there, and this visit's subtree is what
            # that substitute was rebuilt from. Its parts are substitutes too,
            # which the plan does not know (a jax.jit's new function): not walked.
            self.pos = plan.end[i]
            self.leaf_pos = plan.leaf_end[i]
            return v
        self.pos = i + 1
        was = plan.type_of[i]
        if type(v) is not was:
            raise RebuildMismatch(f"a {type(v).__name__}, not a {was.__name__}")
        if plan.is_ref[i]:
            new = self.memo.get(id(v))
            if new is None:
                raise RebuildMismatch(f"a {type(v).__name__} not rebuilt before")
            return new
        return (TABLE.get(type(v)) or classify(v)).rebuild(self, v, i)

    def run(self, fn):
        """``fn`` rebuilt, after checking that the walk replayed the whole plan."""
        new = self.walk(fn)
        if self.pos != len(self.plan.parent) or self.leaf_pos != len(self.leaves):
            raise RebuildMismatch(f"{self.leaf_pos} of {len(self.leaves)} leaves rebuilt")
        return new


def rebuild(fn: Any, leaves, lift: Lift = None) -> Any:
    """Returns a copy of ``fn`` with its leaves replaced, in walk order, by
    ``leaves`` (``lift``: as for the walk that collected them); ``fn`` and
    what it reaches are left as they are."""
    if not leaves:
        return fn
    return Rebuilder(_plan(fn, leaves, lift), leaves).run(fn)


def substitute(
    fn: Any, leaves, lift: Lift = None, baked: frozenset[int] = frozenset()
) -> tuple[Any, Rebuilder | None]:
    """``fn`` ready to trace with ``leaves`` (tracers) where its arrays are,
    in place (see :class:`Rebuilder`), and the Rebuilder whose ``restore``
    must run once the trace is over (None if nothing was substituted).
    ``baked``: the walk positions of leaves kept as they are (see .bake)."""
    if not leaves:
        return fn, None
    plan = Plan(fn, lift)
    if baked:
        leaves = bake.merge(baked, plan.leaves, leaves)
    _check(plan, leaves)
    r = Rebuilder(plan, leaves, in_place=True)
    try:
        return r.run(fn), r
    except BaseException:
        r.restore()
        raise


def _plan(fn, leaves, lift) -> Plan:
    plan = Plan(fn, lift)
    _check(plan, leaves)
    return plan


def _check(plan: Plan, leaves) -> None:
    if len(plan.leaves) != len(leaves):  # what the function reaches changed since its key
        raise RebuildMismatch(f"{len(plan.leaves)} leaves at trace time, {len(leaves)} passed")
