"""The guard of a registered pytree node: one level of its flatten, re-checked.

A model closed over (an nnx or equinox Module, a flax TrainState) is a tree of
registered pytree nodes, which the walk keys as ``(node type, key of its
metadata, keys of its children)`` from one level of the node's flatten (see
``containers.Pytree``). Without a guard, a closure over a model took the full
walk of the model on every call. :class:`PytreeGuard` re-checks a node as the
walk keys it: the node's type, one level of the type's own flatten, then the
metadata and each child with the guards of what they were, the metadata
first, as the walk walks it first. Nothing library-specific: the flatten is
the one registered for the type.

That flatten is called directly (``register_pytree_node`` hands the very same
function to JAX's C++ registry, which the walk's ``tree_flatten`` calls), for
the types registered so; the builtin nodes (tuples, lists, dicts, their
subclasses, None), whose one-level flatten differs from the walk's node data,
keep their own guards. A node whose flatten is declared to read only its
fields is re-checked through them instead, with no call (see .pure_nodes).
"""

from __future__ import annotations

import operator
from threading import get_ident

from .classes import type_state
from .codegen import FAIL, compile_guard
from .container_guards import _Items
from .guards import guard_fits
from .kind import NO_GUARD, TABLE
from .records import guard_of

try:
    from jax._src.tree_util import _registry
except ImportError:  # a JAX that keeps no Python registry: no guard, the full walk
    _registry = {}


def registered_flatten(tp: type):
    """The flatten function registered for node type ``tp``, or None for the
    builtin nodes and what has no Python registration."""
    if tp is type(None) or issubclass(tp, (tuple, list, dict)):
        return None
    entry = _registry.get(tp)
    return None if entry is None else entry.to_iter


def one_level(flatten, v):
    """``(children, metadata)`` from ``flatten``: children as a list or
    tuple (a flatten may return any iterable)."""
    children, aux = flatten(v)
    if type(children) is not list and type(children) is not tuple:
        children = list(children)
    return children, aux


class NodeChecks:
    """What the guards of a registered pytree node share: the one check of
    the node's type, and, past what a record's function writes out (a model
    of many layers), a call of the node's checks compiled on their own, so
    that each node's lines are written once, however large the model. A
    node guard holds ``type``, ``kind``, ``cls_state``, ``weight`` (about
    how many checks its written form takes: a model's root, all of the
    model's) and ``check`` (that form compiled), and writes ``emit_body``."""

    __slots__ = ()

    def type_fits(self, v, sinks) -> bool:
        """Whether ``v`` is a node of this type, still keyed as one, its
        class's state holding (see :meth:`emit_type`)."""
        tp, state = self.type, self.cls_state
        if type(v) is not tp or TABLE.get(tp) is not self.kind:
            return False
        return state is None or state.holds(sinks)

    def emit_type(self, w, i, v) -> None:
        tp = w.const(self.type)
        w.fail_if(i, f"type({v}) is not {tp} or _TABLE.get({tp}) is not {w.const(self.kind)}")
        if self.cls_state is not None:
            w.fail_if(i, f"not {w.const(self.cls_state)}.holds(sinks)")

    def emit(self, w, i, v):
        if self.weight > w.budget:
            w.fail_if(i, f"not {w.const(self.compiled())}({v}, leaves, sinks, {w.seen})")
            return
        w.budget -= 1
        self.emit_body(w, i, v)

    def compiled(self):
        """This node's checks as a function of their own (see codegen's
        ``compile_guard``)."""
        if self.check is None:
            self.check = compile_guard(self, self.hold, self.hold_consts())
        return self.check

    def hold(self, kept) -> str:
        """The line that keeps what the compiled checks made (see codegen's
        ``compile_guard``)."""
        return "pass"

    def hold_consts(self) -> dict:
        return {}


class PytreeGuard(_Items, NodeChecks):
    """A node of this type, still of this kind, whose one-level flatten has
    metadata that fits ``aux`` and as many children as ``items``, each
    fitting its guard."""

    __slots__ = ("type", "kind", "cls_state", "flatten", "aux", "held", "weight", "check")
    numbers = True

    def __init__(self, tp, kind, flatten, aux, items, cls_state=None):
        super().__init__(items)
        self.type, self.kind, self.flatten, self.aux = tp, kind, flatten, aux
        # For a user class, its state (see .classes), which must still hold.
        self.cls_state = cls_state
        # What the last check in each thread flattened (see fits).
        self.held: dict = {}
        self.weight = 1 + sum(map(weight, (aux, *items)))
        self.check = None

    def fits(self, v, leaves, sinks, seen) -> bool:
        if not self.type_fits(v, sinks):
            return False
        try:
            children, aux = out = one_level(self.flatten, v)
        except Exception:  # noqa: BLE001 - the walk keys such a node otherwise
            return False
        # The walk keeps what it numbers alive to its end, so that no id is
        # met twice for two objects; a flatten may make what it returns, so
        # this keeps it until this thread's next check here (the generated
        # form keeps it in locals).
        self.held[get_ident()] = out
        expected = self.aux
        if len(children) != len(self.items) or (
            aux is not expected and not guard_fits(aux, expected, leaves, sinks, seen)
        ):
            return False
        return self.items_fit(children, leaves, sinks, seen)

    def hold(self, kept) -> str:
        return f"_held[_ident()] = ({', '.join(kept)},)"

    def hold_consts(self) -> dict:
        return {"_held": self.held, "_ident": get_ident}

    def emit_body(self, w, i, v):
        self.emit_type(w, i, v)
        children, aux = w.var(), w.var()
        w.kept += (children, aux)
        w.line(i, "try:")
        w.line(i + 1, f"{children}, {aux} = {w.const(self.flatten)}({v})")
        w.line(i, "except Exception:")
        w.line(i + 1, FAIL)
        # (one_level, written out: a call per node would cost more than its checks)
        w.line(i, f"if type({children}) is not list and type({children}) is not tuple:")
        w.line(i + 1, f"{children} = list({children})")
        n = len(self.items)
        w.fail_if(i, f"len({children}) != {n}")
        w.value(i, self.aux, aux)
        w.items(i, self, children, [f"{children}[{k}]" for k in range(n)])


def weight(guard) -> int:
    """About how many checks ``guard``'s written form takes."""
    if issubclass(type(guard), NodeChecks):
        return guard.weight
    return 1 + len(getattr(guard, "items", ()))


def node_guard(kind, v, k, data, children, records, item_guards):
    """The guard of node ``v`` of ``kind``, keyed ``k``, which the walk
    flattened into ``data`` (its node type and metadata) and ``children``
    (``item_guards``: their guards' maker): where the type's registered
    flatten gives what the walk's did (the very children, equal metadata),
    else NO_GUARD (a flatten that makes its children anew cannot be held to
    the walk's)."""
    node_type, aux = data
    flatten = registered_flatten(type(v))
    if flatten is None or node_type is not type(v) or len(k) != 3 or len(children) != len(k[2]):
        return NO_GUARD
    try:
        mine, my_aux = one_level(flatten, v)
        same = (
            len(mine) == len(children)
            and all(map(operator.is_, mine, children))
            and (my_aux is aux or bool(my_aux == aux))
        )
    except Exception:  # noqa: BLE001 - a library's flatten or == may raise anything
        same = False
    if not same:
        return NO_GUARD
    items, expected = item_guards(children, k[2], records), guard_of(aux, k[1], records)
    if items is NO_GUARD or expected is NO_GUARD:
        return NO_GUARD
    # (A user class's state, re-checked with the node: see .classes.)
    return PytreeGuard(type(v), kind, flatten, expected, items, type_state(k[0]))
