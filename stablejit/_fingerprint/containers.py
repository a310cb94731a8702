"""Kinds of containers: tuples, lists, dicts, sets and registered pytree nodes.

Mutable containers (lists, dicts) are substituted in place at trace time;
tuples and pytree nodes are copied around their substitutes.
"""

from __future__ import annotations

import operator

import jax

from .classes import class_key, is_user_class, type_state
from .container_guards import DictGuard, ListGuard, TupleGuard
from .kind import NO_GUARD, Kind, keys, ref_key
from .objects import attributes, not_a_pytree
from .places import ITEM, RebuildMismatch
from .pure_nodes import node_guard
from .records import guard_of
from .sinks import sink_key, sink_of


def _indexed(w, v):
    return [(f"[{i}]", x) for i, x in enumerate(v)]


class Tuple(Kind):
    name = "tuple"
    children = staticmethod(_indexed)

    def key(self, w, v):
        return (tuple, keys(w, v))

    def rebuild(self, r, v, i):
        walk = r.walk
        return tuple([walk(x) for x in v])

    def guard(self, v, k, records):
        return items_guard(v, k[1], records)


class List(Kind):
    name = "list"
    cyclic = True

    def children(self, w, v):
        return [] if sink_of(w, v) is not False else _indexed(w, v)

    def key(self, w, v):
        if sink_of(w, v) is not False:
            return sink_key(v)  # so never rebuilt: the traced function appends to the original
        ref = w.enter(v)
        if ref is not None:
            return ref
        return (list, keys(w, v))

    def guard(self, v, k, records):
        items = item_guards(v, k[1], records)
        return NO_GUARD if items is NO_GUARD else ListGuard(items)

    def rebuild(self, r, v, i):
        walk = r.walk
        if r.in_place:
            r.memo[id(v)] = v
            for k, x in enumerate(list.copy(v)):
                nx = walk(x)
                if nx is not x:
                    r.put(ITEM, v, k, nx)
            return v
        new = r.memo[id(v)] = []
        new.extend([walk(x) for x in v])
        return new


class Dict(Kind):
    """Dicts, in insertion order (code iterating over one sees that order):
    all keys, then all values."""

    name = "dict"
    cyclic = True

    def children(self, w, v):
        skip = sink_of(w, v) or ()
        return [(f"[{k!r}]", x) for k, x in v.items() if k not in skip]

    def key(self, w, v):
        # w.enter(v), inlined: parameter trees are dicts all the way down.
        seen = w.seen
        ref = seen.get(id(v))
        if ref is not None:
            return ref_key(ref)
        seen[id(v)] = len(seen)
        w.alive.append(v)
        skip = sink_of(w, v)
        if skip:
            kept = [k for k in v if k not in skip]
            return (dict, sink_key(v), keys(w, kept), keys(w, [v[k] for k in kept]))
        return (dict, keys(w, v), keys(w, v.values()))

    def guard(self, v, k, records):
        names = tuple(v)
        # Only string keys (parameter names, attributes), keyed as themselves;
        # and no side channels among the items (their key has a fourth part).
        if len(k) != 3 or not all(type(x) is str for x in names):
            return NO_GUARD
        items = item_guards(v.values(), k[2], records)
        return NO_GUARD if items is NO_GUARD else DictGuard(names, items)

    def rebuild(self, r, v, i):
        walk = r.walk
        skip = sink_of(r, v)
        kept = [k for k in v if not (skip and k in skip)]
        for k in kept:
            walk(k)
        if r.in_place:
            r.memo[id(v)] = v
            for k in kept:
                x = dict.__getitem__(v, k)
                nx = walk(x)
                if nx is not x:
                    r.put(ITEM, v, k, nx)
            return v
        new = r.memo[id(v)] = {}
        rebuilt = {k: walk(v[k]) for k in kept}
        for k, x in v.items():  # side channels keep their place and object
            new[k] = rebuilt.get(k, x)
        return new


def _with_node_data(treedef, node_type, aux, v):
    """``treedef`` (one node over leaves) with its metadata replaced."""
    make = getattr(treedef, "from_node_data_and_children", None)
    if make is None:
        raise RebuildMismatch(
            f"stablejit cannot lift the arrays held in the static (metadata) fields of "
            f"a {type(v).__qualname__} pytree with this JAX version ({jax.__version__}); "
            "upgrade JAX or make those fields pytree children."
        )
    from jax._src.tree_util import default_registry

    return make(default_registry, (node_type, aux), treedef.children())


def flatten_one_level(v):
    children, treedef = jax.tree_util.tree_flatten(v, is_leaf=lambda x: x is not v)
    return children, treedef


class _Unflattenable(Exception):
    """A registered pytree node whose flattening raises for this value."""


def _flatten_or_fall_back(v):
    try:
        return flatten_one_level(v)
    except Exception as e:  # noqa: BLE001 - the library's flatten may raise anything
        raise _Unflattenable from e


class Pytree(Kind):
    """Registered pytree nodes (NamedTuples, dataclass pytrees, modules).

    The node's auxiliary data is walked like any value rather than compared
    with ``==``, so callables held there (a ``TrainState.apply_fn``) are keyed
    by structure, not identity.

    A node that cannot be flattened (a ``defaultdict`` whose keys do not sort,
    which JAX's flatten sorts) is keyed as if it were not a pytree, as
    ``jax.jit`` never flattens what a function closes over.

    A static node, its own auxiliary data (``jax.tree_util.register_static``,
    flax's ``GraphDef``), is keyed by value, as JAX compares it: walking its
    auxiliary data would walk itself without end.
    """

    name = "pytree"

    def key(self, w, v):
        try:
            children, treedef = _flatten_or_fall_back(v)
        except _Unflattenable:
            return not_a_pytree(v).key(w, v)
        node_type, aux = treedef.node_data()
        if aux is v:
            return (node_type, _StaticNode(v)) if _hashable(v) else not_a_pytree(v).key(w, v)
        # (A user class by its contents too: its methods are what a trace calls.)
        node = class_key(w, node_type) if is_user_class(node_type) else node_type
        return (node, w.walk(aux), keys(w, children))

    def rebuild(self, r, v, i):
        try:
            children, treedef = _flatten_or_fall_back(v)
        except _Unflattenable:
            return not_a_pytree(v).rebuild(r, v, i)
        walk = r.walk
        if r.in_place:
            places = _held_in_place(r, v, i, children)
            if places is not None:
                # The node's own object, its children substituted where it
                # holds them: traced code sees the program's objects, as under
                # jax.jit (an nnx Variable refuses updates from an inner trace).
                walk(treedef.node_data()[1])  # leaf-free: skipped
                for c in children:
                    nc = walk(c)
                    if nc is not c:
                        r.put(*places[id(c)], nc)
                return v
        node_type, aux = treedef.node_data()
        new_aux = walk(aux)
        if new_aux is not aux:  # the metadata holds lifted arrays (a closure over one)
            treedef = _with_node_data(treedef, node_type, new_aux, v)
        new = treedef.unflatten([walk(c) for c in children])
        if r.in_place:  # a write into the copy would be lost: see Rebuilder.check_writes
            attrs = attributes(new)
            held = {name: (place, holder) for place, holder, name, _ in attrs}
            r.copied(
                [(name, x) for *_, name, x in attrs],
                lambda name: held[name][0].get(held[name][1], name),
                lambda name: f"{type(v).__qualname__}.{name}",
            )
        return new

    def children(self, w, v):
        tu = jax.tree_util
        try:
            pairs, treedef = tu.tree_flatten_with_path(v, is_leaf=lambda x: x is not v)
        except Exception:  # noqa: BLE001 - as in key()
            return not_a_pytree(v).children(w, v)
        aux = treedef.node_data()[1]
        if aux is v:  # a static node: itself (see key)
            return []
        static = [] if aux is None else [(" (static fields)", aux)]
        return static + [(tu.keystr(path), x) for path, x in pairs]

    def node_token(self, v):
        try:
            return _flatten_or_fall_back(v)[1].node_data()[0]
        except _Unflattenable:
            return not_a_pytree(v).node_token(v)

    def guard(self, v, k, records):
        # A static node, hashable so taken to be immutable, as JAX takes it:
        # the very object again has its key.
        if len(k) == 2 and type(k[1]) is _StaticNode and k[1].value is v:
            return v
        # A NamedTuple (optax's states and transforms) as a tuple of its items.
        if _is_namedtuple(v):
            items = item_guards(v, k[2], records)
            return NO_GUARD if items is NO_GUARD else TupleGuard(type(v), items, type_state(k[0]))
        try:  # any other node: one level of its flatten, or its fields (see .pure_nodes)
            children, treedef = _flatten_or_fall_back(v)
        except _Unflattenable:
            return NO_GUARD  # keyed as if not a pytree (see key)
        return node_guard(self, v, k, treedef.node_data(), children, records, item_guards)


class _StaticNode:
    """A static pytree node in a key: equal as JAX compares it (its own
    ``==`` and hash, each computed once here), and never equal to a value of
    another type that happens to compare equal."""

    __slots__ = ("value", "_hash")

    def __init__(self, value):
        self.value, self._hash = value, hash(value)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return (
            type(other) is _StaticNode
            and type(other.value) is type(self.value)
            and (other.value is self.value or bool(other.value == self.value))
        )

    def __repr__(self):
        return f"<static {type(self.value).__qualname__}>"


def _hashable(v) -> bool:
    try:
        hash(v)
    except Exception:  # noqa: BLE001 - a library's __hash__ may raise anything
        return False
    return True


def _held_in_place(r, v, i, children) -> dict | None:
    """Where ``v`` holds each of its children that must be substituted at
    trace time (id(child) → (place, holder, name)): an attribute holding that
    very object. None if a child is not held so (a flatten that computes its
    children) or the metadata holds leaves: then the node is copied."""
    kids = r.plan.children[i]  # the metadata's visit, then each child's
    has_leaf = r.plan.has_leaf
    if has_leaf[kids[0]]:
        return None
    held: dict = {}
    for place, holder, name, x in attributes(v):
        held.setdefault(id(x), (place, holder, name))
    places = {}
    for c, k in zip(children, kids[1:], strict=True):
        if has_leaf[k]:
            place = held.get(id(c))
            if place is None:
                return None
            places[id(c)] = place
    return places


def is_pytree_node(cls, v) -> bool:
    try:
        children, treedef = flatten_one_level(v)
    except Exception:  # noqa: BLE001 - a failing flatten means "not a usable node"
        return False
    return not (
        treedef.num_nodes == 1 and treedef.num_leaves == 1 and children and children[0] is v
    )


def _is_namedtuple(v) -> bool:
    """A NamedTuple as jax.tree_util flattens one: its items, no metadata."""
    if not (isinstance(v, tuple) and hasattr(type(v), "_fields")):
        return False
    children, treedef = flatten_one_level(v)
    same = len(children) == len(v) and all(map(operator.is_, children, v))
    return same and treedef.node_data()[1] is None


def item_guards(values, item_keys: tuple, records):
    """The guards of ``values`` keyed ``item_keys``, or NO_GUARD if one has none."""
    items = tuple([guard_of(x, ik, records) for x, ik in zip(values, item_keys, strict=True)])
    return NO_GUARD if any(x is NO_GUARD for x in items) else items


def items_guard(v: tuple, item_keys: tuple, records):
    """A tuple of ``v``'s type whose items fit the guards of ``v``'s items."""
    items = item_guards(v, item_keys, records)
    return NO_GUARD if items is NO_GUARD else TupleGuard(type(v), items)


class TreeDef(Kind):
    """A pytree's structure (``jax.tree_util.PyTreeDef``): its nodes' types by
    identity and their metadata walked, node by node, as the walk keys them
    anywhere else (a function there is keyed by structure, a trace counter
    it writes left out, an array lifted).

    Libraries pass structures to ``jax.jit`` as static arguments, flattened
    afresh for each call (equinox's ``filter_jit`` passes the static half of
    its arguments so). As an object with no readable state, a structure was
    hashed through cloudpickle, which pickles a locally defined node class by
    value and fails on one it cannot (an equinox Module's): keyed by
    identity then, every call's new structure traced again where jax.jit,
    comparing structures by equality, hit.
    """

    name = "pytree structure"

    def key(self, w, v):
        return (type(v), self._node(w, v))

    def _node(self, w, v):
        data = v.node_data()  # (node type, metadata); None for a leaf
        if data is None:
            return None
        return (w.walk(data), tuple([self._node(w, c) for c in v.children()]))

    def rebuild(self, r, v, i):
        # Only for metadata holding an array: the nodes rebuilt in the key's
        # order (each node's metadata, then its children), around the new
        # metadata where it changed.
        data = v.node_data()
        if data is None:
            return v
        new = r.walk(data)
        children = v.children()
        rebuilt = [self.rebuild(r, c, i) for c in children]
        if new is data and all(n is c for n, c in zip(rebuilt, children, strict=True)):
            return v
        from jax._src.tree_util import default_registry

        make = getattr(type(v), "from_node_data_and_children", None)
        if make is None:  # (JAX before 0.7: as _with_node_data says)
            raise RebuildMismatch(
                "stablejit cannot lift the arrays held in a pytree structure's metadata on "
                "this JAX (PyTreeDef.from_node_data_and_children is missing)"
            )
        return make(default_registry, new, rebuilt)

    def children(self, w, v):
        data = v.node_data()
        return [] if data is None else [("node", data)]
