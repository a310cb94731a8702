"""The table of value kinds: how each kind of value enters a fingerprint.

Every value reachable from a callable is one of these kinds. A kind knows two
things, written side by side so that they visit children in the same order:

* ``key(w, v)``: the hashable static key of ``v``; arrays are appended to
  ``w.leaves`` instead of being hashed.
* ``rebuild(r, v, i)``: ``v`` with every leaf replaced by the next value of
  ``r`` (tracers, at trace time). At trace time (``r.in_place``) mutable
  values get the substitutes in place, through ``r.put``, and are returned
  themselves, so the traced code sees the program's own objects; immutable
  ones are copied. Otherwise every holder of a leaf is copied (see
  ``_fingerprint.Rebuilder``). Only called for values that hold leaves;
  everything else is kept as the very same object.

Kinds that can take part in reference cycles (``cyclic``) are allocated before
their children are rebuilt, so a back reference finds the new object.

A new kind is one :class:`Kind` subclass and one :func:`register_kind` call.
"""

from __future__ import annotations

import copy
import enum
import functools
import logging
import math
import threading
import types
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import xxhash
from jax import core as _core
from jax.extend import core as _ext_core

from ._code import _INFO as _CODE_INFO
from ._code import code_info, is_library_file
from ._idref import IdRef
from ._patch import JIT as _jax_jit
from ._sinks import sink_key
from ._slots import ATTR, CELL, GLOBAL, ITEM

MISSING = type("Missing", (), {"__repr__": lambda self: "<missing>"})()
"""Key of an unbound global or an empty cell."""

LEAF = type("Leaf", (), {"__repr__": lambda self: "<leaf>"})()
"""Key of a value lifted to an input of the compiled computation."""

LIFTED_SCALAR = type("LiftedScalar", (), {"__repr__": lambda self: "<lifted scalar>"})()
"""Key of a Python number lifted to an input (see ``lift_scalars``)."""


class Kind:
    """How one kind of value is keyed and rebuilt. Subclasses override both."""

    name = "kind"
    cyclic = False

    def key(self, w, v):
        raise NotImplementedError

    def rebuild(self, r, v, i):
        raise AssertionError(f"{self.name} values never hold leaves")

    def children(self, w, v) -> list[tuple[str, Any]]:
        """``(label, value)`` of each part of ``v`` that its key is made of,
        for people to read (see :mod:`stablejit._describe`); side channels
        are left out, as keys leave them out. Labels starting with ``[`` or
        ``.`` continue the parent's name."""
        return []

    def node_token(self, v) -> Any:
        """What, besides its children, tells two values of this kind apart."""
        return None


# ---------------------------------------------------------------- atoms


class _Leaf(Kind):
    name = "array"

    def key(self, w, v):
        w.leaves.append(v)
        return LEAF

    def rebuild(self, r, v, i):
        return r.next_leaf()


_INT32 = range(-(2**31), 2**31)


class _Scalar(Kind):
    """Python scalars, by (type, value): ``1``, ``1.0`` and ``True`` differ.

    An ``int`` is lifted only when its variable is named in ``lift_scalars``
    (ints are mostly sizes, which must stay static), and if it fits int32.
    """

    name = "scalar"

    def key(self, w, v):
        if w.name_ok and type(v) is int and v in _INT32:
            w.leaves.append(v)
            return LIFTED_SCALAR
        return (type(v), v)

    def rebuild(self, r, v, i):
        return r.next_leaf()


class _Str(Kind):
    """Strings are their own key: no other kind's key is a ``str``, and
    dict keys and names, the commonest values of all, then cost nothing."""

    name = "str"

    def key(self, w, v):
        return v


class _Float(Kind):
    """Floats by value, or lifted (``lift_scalars``)."""

    name = "float"
    rebuild = _Scalar.rebuild

    def key(self, w, v):
        if w.lift is not None and (w.lift is True or w.name_ok):
            w.leaves.append(v)
            return LIFTED_SCALAR
        # -0.0 == 0.0 and nan != nan: spell those out so the key is exact.
        if v == v and v != 0.0 and not math.isinf(v):
            return (type(v), v)
        return (type(v), float.hex(v))


class _Complex(Kind):
    name = "complex"
    rebuild = _Scalar.rebuild

    def key(self, w, v):
        if w.lift is not None and (w.lift is True or w.name_ok):
            w.leaves.append(v)
            return LIFTED_SCALAR
        return (type(v), float.hex(v.real), float.hex(v.imag))


class _NumpyScalar(Kind):
    name = "numpy scalar"

    def key(self, w, v):
        return (type(v), v.dtype.str, v.tobytes())


class _NoneKind(Kind):
    name = "None"

    def key(self, w, v):
        return None


class _Identity(Kind):
    """Long-lived objects keyed by identity: modules, classes, builtins.

    The key holds the object itself, which keeps it alive (so its id cannot
    be reused) and compares by identity for these types.
    """

    name = "identity"

    def key(self, w, v):
        return v


class _IdentityRef(Kind):
    """Objects keyed by identity whose own ``__eq__`` is not identity."""

    name = "identity"

    def key(self, w, v):
        return IdRef(v)


class _Value(Kind):
    """Immutable values with a meaningful ``__eq__``: dtypes, shardings, enums."""

    name = "value"

    def key(self, w, v):
        return (type(v), v)


class _Set(Kind):
    name = "set"

    def key(self, w, v):
        # Elements are hashable, so they hold no arrays and need no rebuild.
        return (type(v), frozenset([w.walk(x) for x in v]))


# ---------------------------------------------------------------- containers


def _keys(w, values) -> tuple:
    """The keys of ``values``, in order, as ``w.walk`` gives them.

    Strings and arrays, most of what a pytree of parameters holds, are keyed
    inline when only the key is wanted; walks that watch every visit
    (``not w.exact``) take ``w.walk`` for each.
    """
    walk = w.walk
    if not w.exact:
        return tuple([walk(x) for x in values])
    leaves = w.leaves
    out = []
    for x in values:
        t = type(x)
        if t is str:
            out.append(x)
        elif TABLE.get(t) is _LEAF:
            leaves.append(x)
            out.append(LEAF)
        else:
            out.append(walk(x))
    return tuple(out)


def _sink_of(w, v):
    """The names of ``v`` that are side channels (see _sinks), or False."""
    sinks = w.sinks
    if sinks:
        entry = sinks.get(id(v))
        if entry is not None and entry[0] is v:
            return entry[1]
    return False


def _indexed(w, v):
    return [(f"[{i}]", x) for i, x in enumerate(v)]


class _Tuple(Kind):
    name = "tuple"
    children = staticmethod(_indexed)

    def key(self, w, v):
        return (tuple, _keys(w, v))

    def rebuild(self, r, v, i):
        walk = r.walk
        return tuple([walk(x) for x in v])


class _List(Kind):
    name = "list"
    cyclic = True

    def children(self, w, v):
        return [] if _sink_of(w, v) is not False else _indexed(w, v)

    def key(self, w, v):
        if _sink_of(w, v) is not False:
            return sink_key(v)  # so never rebuilt: the traced function appends to the original
        ref = w.enter(v)
        if ref is not None:
            return ref
        return (list, _keys(w, v))

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


class _Dict(Kind):
    """Dicts, in insertion order (code iterating over one sees that order):
    all keys, then all values."""

    name = "dict"
    cyclic = True

    def children(self, w, v):
        skip = _sink_of(w, v) or ()
        return [(f"[{k!r}]", x) for k, x in v.items() if k not in skip]

    def key(self, w, v):
        # w.enter(v), inlined: parameter trees are dicts all the way down.
        seen = w.seen
        ref = seen.get(id(v))
        if ref is not None:
            return ("ref", ref)
        seen[id(v)] = len(seen)
        skip = _sink_of(w, v)
        if skip:
            kept = [k for k in v if k not in skip]
            return (dict, sink_key(v), _keys(w, kept), _keys(w, [v[k] for k in kept]))
        return (dict, _keys(w, v), _keys(w, v.values()))

    def rebuild(self, r, v, i):
        walk = r.walk
        skip = _sink_of(r, v)
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


class _Subclass(Kind):
    """Subclasses of list, dict and tuple that are not pytrees (``Counter``):
    their type by identity, their items as the base kind's, their ``__dict__``."""

    name = "container subclass"

    def __init__(self, cls, base: Kind):
        self.base = base
        self.new = cls.__new__
        self.cyclic = base.cyclic
        self.has_dict = any("__dict__" in c.__dict__ for c in cls.__mro__)

    def key(self, w, v):
        d = object.__getattribute__(v, "__dict__") if self.has_dict else None
        return (IdRef(type(v)), self.base.key(w, v), w.walk(d) if d else None)

    def children(self, w, v):
        d = object.__getattribute__(v, "__dict__") if self.has_dict else {}
        return self.base.children(w, v) + [(f".{k}", x) for k, x in d.items()]

    def rebuild(self, r, v, i):
        if r.in_place and self.cyclic:  # a list or dict: its items in place
            self.base.rebuild(r, v, i)
            d = object.__getattribute__(v, "__dict__") if self.has_dict else None
            if d:
                r.walk(d)
            return v
        cls = type(v)
        items = self.base.rebuild(r, v, i)
        new = self.new(cls, items) if isinstance(items, tuple) else self.new(cls)
        if isinstance(items, list):
            new.extend(items)
        elif isinstance(items, dict):
            new.update(items)
        r.memo[id(v)] = new
        d = object.__getattribute__(v, "__dict__") if self.has_dict else None
        if d:
            object.__getattribute__(new, "__dict__").update(r.walk(d))
        return new


def _with_node_data(treedef, node_type, aux, v):
    """``treedef`` (one node over leaves) with its metadata replaced."""
    make = getattr(treedef, "from_node_data_and_children", None)
    if make is None:
        raise TypeError(
            f"stablejit cannot lift the arrays held in the static (metadata) fields of "
            f"a {type(v).__qualname__} pytree with this JAX version ({jax.__version__}); "
            "upgrade JAX or make those fields pytree children."
        )
    from jax._src.tree_util import default_registry

    return make(default_registry, (node_type, aux), treedef.children())


def _flatten_one_level(v):
    children, treedef = jax.tree_util.tree_flatten(v, is_leaf=lambda x: x is not v)
    return children, treedef


class _Unflattenable(Exception):
    """A registered pytree node whose flattening raises for this value."""


def _flatten_or_fall_back(v):
    try:
        return _flatten_one_level(v)
    except Exception as e:  # noqa: BLE001 - the library's flatten may raise anything
        raise _Unflattenable from e


class _Pytree(Kind):
    """Registered pytree nodes (NamedTuples, dataclass pytrees, modules).

    The node's auxiliary data is walked like any value rather than compared
    with ``==``, so callables held there (a ``TrainState.apply_fn``) are keyed
    by structure, not identity.

    A node that cannot be flattened (a ``defaultdict`` whose keys do not sort,
    which JAX's flatten sorts) is keyed as if it were not a pytree, as
    ``jax.jit`` never flattens what a function closes over.
    """

    name = "pytree"

    def key(self, w, v):
        try:
            children, treedef = _flatten_or_fall_back(v)
        except _Unflattenable:
            return _not_a_pytree(v).key(w, v)
        node_type, aux = treedef.node_data()
        return (node_type, w.walk(aux), _keys(w, children))

    def rebuild(self, r, v, i):
        try:
            children, treedef = _flatten_or_fall_back(v)
        except _Unflattenable:
            return _not_a_pytree(v).rebuild(r, v, i)
        walk = r.walk
        node_type, aux = treedef.node_data()
        new_aux = walk(aux)
        if new_aux is not aux:  # the metadata holds lifted arrays (a closure over one)
            treedef = _with_node_data(treedef, node_type, new_aux, v)
        new = treedef.unflatten([walk(c) for c in children])
        r.copied(
            enumerate(_flatten_one_level(new)[0]),
            lambda k: _flatten_one_level(new)[0][k],
            lambda k: f"child {k} of a {type(v).__qualname__}",
        )
        return new

    def children(self, w, v):
        tu = jax.tree_util
        try:
            pairs, treedef = tu.tree_flatten_with_path(v, is_leaf=lambda x: x is not v)
        except Exception:  # noqa: BLE001 - as in key()
            return _not_a_pytree(v).children(w, v)
        aux = treedef.node_data()[1]
        static = [] if aux is None else [(" (static fields)", aux)]
        return static + [(tu.keystr(path), x) for path, x in pairs]

    def node_token(self, v):
        try:
            return _flatten_or_fall_back(v)[1].node_data()[0]
        except _Unflattenable:
            return _not_a_pytree(v).node_token(v)


# ---------------------------------------------------------------- callables


def _module_is_library(mod: types.ModuleType) -> bool:
    f = getattr(mod, "__file__", None)
    return f is None or is_library_file(f)


_EMPTY_CELL = MISSING


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return _EMPTY_CELL


def _walk_named(w, v):
    """Walks the value of a variable named in ``lift_scalars``: if it is a
    number, it is lifted (see _Scalar, _Float); numbers inside containers it
    holds are not, so that what is lifted can be read off the names."""
    if type(v) not in (int, float, complex):
        return w.walk(v)
    w.name_ok = True
    try:
        return w.walk(v)
    finally:
        w.name_ok = False


def _resolve_chain(root, chain):
    """Follows ``config.SCALE``-style chains through user modules.

    Returns ``(depth, value)``: ``value`` is the first non-module object (or
    a library module) reached after ``depth`` attribute steps.
    """
    v = root
    depth = 0
    for attr in chain[1:]:
        if not isinstance(v, types.ModuleType) or _module_is_library(v):
            break
        v = getattr(v, attr, MISSING)
        depth += 1
    return depth, v


class _Function(Kind):
    """Python functions: code digest, defaults, globals read, closure cells.

    Children, in order: defaults, kwdefaults, each global read, each
    attribute chain through a user module, each closure cell, ``__dict__``.
    """

    name = "function"
    cyclic = True

    def key(self, w, fn):
        # w.enter(fn), inlined: this is the hot path of every call.
        seen = w.seen
        ref = seen.get(id(fn))
        if ref is not None:
            return ("ref", ref)
        code = fn.__code__
        info = _CODE_INFO.get(id(code)) or code_info(code)
        if info.library and fn.__closure__ is None and "<locals>" not in fn.__qualname__:
            # Keyed by identity, before it could take a number in ``seen``:
            # a fast-path match re-checks such children without numbering
            # them, and back references must count the same either way.
            return fn
        seen[id(fn)] = len(seen)
        if w.exact and info.fast[0] is not None:
            key = known_key(info.fast, fn, w)
            if key is not None:
                return key
        walk = w.walk
        # The order of the walks below is the order rebuild() replays.
        defaults = fn.__defaults__
        if defaults is not None:
            defaults = walk(defaults)
        kwdefaults = fn.__kwdefaults__
        if kwdefaults is not None:
            kwdefaults = walk(kwdefaults)
        g = fn.__globals__
        b = fn.__builtins__
        sinks = w.sinks
        gskip = _sink_of(w, g)
        gkeys = []
        lift = w.lift
        named = lift is not None and lift is not True
        for name in info.global_names:
            if gskip and name in gskip:
                gkeys.append(sink_key(g))
                continue
            v = g.get(name, MISSING)
            if v is MISSING:
                v = b.get(name, MISSING)
            gkeys.append(_walk_named(w, v) if named and name in lift else walk(v))
        for chain in info.attr_chains:
            root = g.get(chain[0], MISSING)
            if isinstance(root, types.ModuleType) and not _module_is_library(root):
                depth, v = _resolve_chain(root, chain)
                gkeys.append((depth, walk(v)))
        closure = fn.__closure__
        if closure is None:
            ckeys = ()
        elif named:
            ckeys = tuple(
                [
                    sink_key(c)
                    if sinks and _sink_of(w, c) is not False
                    else _walk_named(w, _cell_value(c))
                    if name in lift
                    else walk(_cell_value(c))
                    for name, c in zip(code.co_freevars, closure, strict=True)
                ]
            )
        elif sinks:
            ckeys = tuple(
                [
                    sink_key(c) if _sink_of(w, c) is not False else walk(_cell_value(c))
                    for c in closure
                ]
            )
        else:
            ckeys = tuple([walk(_cell_value(c)) for c in closure])
        d = fn.__dict__
        key = (
            info.digest,
            defaults,
            kwdefaults,
            tuple(gkeys),
            ckeys,
            walk(d) if d else None,
        )
        if (
            w.exact
            and not d
            and info.fast[1] < FAST_PATH_TRIES
            and len(gkeys) == len(info.global_names)
        ):
            record = FastPath.build(fn, info, w, gskip, gkeys, ckeys, key)
            if record is None:  # children a fast path cannot re-check (dicts, objects)
                info.fast[1] += 1
            else:
                remember(info.fast, record)
        return key

    def children(self, w, fn):
        code = fn.__code__
        info = code_info(code)
        if info.library and fn.__closure__ is None and "<locals>" not in fn.__qualname__:
            return []
        out = []
        params = code.co_varnames[: code.co_argcount]
        defaults = fn.__defaults__ or ()
        names = params[len(params) - len(defaults) :]
        out += [(f"default argument {n!r}", v) for n, v in zip(names, defaults, strict=True)]
        out += [(f"default argument {n!r}", v) for n, v in (fn.__kwdefaults__ or {}).items()]
        g, b = fn.__globals__, fn.__builtins__
        gskip = _sink_of(w, g) or ()
        for name in info.global_names:
            if name not in gskip:
                out.append((f"global {name!r}", g.get(name, b.get(name, MISSING))))
        for chain in info.attr_chains:
            root = g.get(chain[0], MISSING)
            if isinstance(root, types.ModuleType) and not _module_is_library(root):
                depth, v = _resolve_chain(root, chain)
                out.append((f"global {'.'.join(chain[: depth + 1])!r}", v))
        for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=True):
            if _sink_of(w, cell) is False:
                out.append((f"closure variable {name!r}", _cell_value(cell)))
        out += [(f"attribute {k!r}", v) for k, v in fn.__dict__.items()]
        return out

    def node_token(self, fn):
        return code_info(fn.__code__).digest

    def rebuild(self, r, fn, i):
        """A new function object (JAX caches traces by function object) over
        the substitutes. At trace time they go into the function's own
        cells, globals, kwdefaults and attributes, in place, so ``nonlocal``
        and ``global`` writes reach the program as under ``jax.jit``;
        otherwise into private copies of the cells and globals that hold
        leaves (see :meth:`_private`)."""
        code = fn.__code__
        info = code_info(code)
        g, b = fn.__globals__, fn.__builtins__
        closure = fn.__closure__
        in_place = r.in_place
        space, cells = (g, closure) if in_place else self._private(r, fn, i, info)
        new = types.FunctionType(code, space, fn.__name__, None, cells)
        new.__qualname__ = fn.__qualname__
        r.memo[id(fn)] = new
        walk = r.walk
        # The order of the walks below is the order key() walks in; a walk
        # returns a new object only where a leaf was substituted.
        if fn.__defaults__ is not None:
            new.__defaults__ = walk(fn.__defaults__)
        if fn.__kwdefaults__ is not None:
            new.__kwdefaults__ = walk(fn.__kwdefaults__)
        gskip = _sink_of(r, g)
        for name in info.global_names:
            if gskip and name in gskip:
                continue  # a side channel: not walked by the key either
            where = g if name in g else b
            v = where.get(name, MISSING)
            nv = walk(v)
            if nv is not v:
                if in_place:
                    r.put(GLOBAL, where, name, nv)
                else:
                    space[name] = nv
        for chain in info.attr_chains:
            root = g.get(chain[0], MISSING)
            if isinstance(root, types.ModuleType) and not _module_is_library(root):
                depth, v = _resolve_chain(root, chain)
                nv = walk(v)
                if nv is v:
                    continue
                if in_place:
                    owner = functools.reduce(getattr, chain[1:depth], root)
                    r.put(GLOBAL, owner.__dict__, chain[depth], nv)
                else:
                    space[chain[0]] = _patched_module(space[chain[0]], chain[1 : depth + 1], nv)
        for name, cell, own in zip(code.co_freevars, closure or (), cells or (), strict=True):
            if _sink_of(r, cell) is not False:
                continue
            v = _cell_value(cell)
            nv = walk(v)
            if nv is not v:
                if in_place:
                    r.put(CELL, cell, name, nv)
                else:
                    own.cell_contents = nv
        if fn.__dict__:
            new.__dict__.update(walk(fn.__dict__))
        return new

    @staticmethod
    def _private(r, fn, i, info):
        """``(globals, cells)`` for a copy of ``fn`` that outlives any trace (a
        ``stable()`` skeleton): a copy of the globals dict if a global holds a
        leaf, a fresh cell for each cell that does; the others shared."""
        kids = iter(r.plan.children[i])
        has_leaf = r.plan.has_leaf
        for d in (fn.__defaults__, fn.__kwdefaults__):  # walked only when set
            if d is not None:
                next(kids)
        g = fn.__globals__
        gskip = _sink_of(r, g)
        names = [n for n in info.global_names if not (gskip and n in gskip)]
        global_kids = [next(kids) for _ in names]
        chains = [
            c
            for c in info.attr_chains
            if isinstance(g.get(c[0], MISSING), types.ModuleType)
            and not _module_is_library(g[c[0]])
        ]
        chain_kids = [next(kids) for _ in chains]
        space = g
        if any(has_leaf[k] for k in global_kids + chain_kids):
            if info.global_stores:
                raise TypeError(
                    f"stablejit cannot lift the arrays in the globals of "
                    f"{fn.__qualname__!r} into a copy: it also assigns the globals "
                    f"{sorted(info.global_stores)}. Pass the arrays as arguments."
                )
            space = dict(g)
        cells = []
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
            k = None if _sink_of(r, cell) is not False else next(kids)
            if k is not None and has_leaf[k]:
                if name in info.deref_stores:
                    raise TypeError(
                        f"{fn.__qualname__!r} assigns its closure variable {name!r} "
                        "(nonlocal), which holds an array; a copy of it cannot write "
                        "the array back. Return the new value instead."
                    )
                cells.append(types.CellType())
            else:
                cells.append(cell)
        return space, tuple(cells) or None


def _patched_module(mod, path, value):
    """A shallow copy of module ``mod`` with ``mod.<path>`` set to ``value``."""
    proxy = types.ModuleType(mod.__name__)
    proxy.__dict__.update(mod.__dict__)
    head, *rest = path
    setattr(proxy, head, _patched_module(getattr(mod, head), rest, value) if rest else value)
    return proxy


class _Method(Kind):
    name = "bound method"

    def key(self, w, m):
        return (types.MethodType, w.walk(m.__func__), w.walk(m.__self__))

    def rebuild(self, r, m, i):
        return types.MethodType(r.walk(m.__func__), r.walk(m.__self__))

    def children(self, w, m):
        return [("method", m.__func__), ("self", m.__self__)]


class _Partial(Kind):
    name = "partial"

    def key(self, w, p):
        walk = w.walk
        return (type(p), walk(p.func), walk(p.args), walk(p.keywords))

    def rebuild(self, r, p, i):
        walk = r.walk
        func, args, keywords = walk(p.func), walk(p.args), walk(p.keywords)
        return type(p)(func, *args, **keywords)

    def children(self, w, p):
        return (
            [("partial of", p.func)]
            + [(f"partial argument {i}", a) for i, a in enumerate(p.args)]
            + [(f"partial keyword {k!r}", a) for k, a in p.keywords.items()]
        )


_JIT_OPTION_FIELDS = (
    "in_shardings_treedef",
    "in_shardings_leaves",
    "out_shardings_treedef",
    "out_shardings_leaves",
    "in_layouts_treedef",
    "in_layouts_leaves",
    "out_layouts_treedef",
    "out_layouts_leaves",
    "static_argnums",
    "static_argnames",
    "donate_argnums",
    "donate_argnames",
    "device",
    "backend",
    "keep_unused",
    "inline",
    "compiler_options_kvs",
)


class _Jitted(Kind):
    """``jax.jit``-wrapped functions: the wrapped function and jit's options."""

    name = "jax.jit function"

    def children(self, w, f):
        return [("jax.jit of", f._fun)]

    def node_token(self, f):
        return tuple([getattr(f._jit_info, name) for name in _JIT_OPTION_FIELDS])

    def key(self, w, f):
        ji = f._jit_info
        return (
            "jax.jit",
            w.walk(f._fun),
            tuple([getattr(ji, name) for name in _JIT_OPTION_FIELDS]),
        )

    def rebuild(self, r, f, i):
        ji = f._jit_info
        tu = jax.tree_util
        if any(x is not None for x in ji.in_layouts_leaves + ji.out_layouts_leaves):
            raise TypeError(
                f"stablejit cannot rebuild {f!r}, a jax.jit with explicit layouts, "
                "around lifted arrays"
            )
        return _jax_jit(
            r.walk(f._fun),
            in_shardings=tu.tree_unflatten(ji.in_shardings_treedef, ji.in_shardings_leaves),
            out_shardings=tu.tree_unflatten(ji.out_shardings_treedef, ji.out_shardings_leaves),
            static_argnums=ji.static_argnums,
            static_argnames=ji.static_argnames,
            donate_argnums=ji.donate_argnums,
            donate_argnames=ji.donate_argnames,
            keep_unused=ji.keep_unused,
            device=ji.device,
            backend=ji.backend,
            inline=ji.inline,
            compiler_options=dict(ji.compiler_options_kvs) or None,
        )


# ---------------------------------------------------------------- objects


def _slot_names(cls) -> tuple[str, ...]:
    names = []
    for c in cls.__mro__:
        slots = c.__dict__.get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        names.extend(s for s in slots if s not in ("__dict__", "__weakref__"))
    return tuple(names)


class _Object(Kind):
    """Plain instances, by type (identity) and state (``__dict__``, slots).

    Arrays in the state are lifted; methods are looked up on the class, which
    is keyed by identity.
    """

    name = "object"
    cyclic = True

    def __init__(self, cls, derived: dict[str, Callable[[Any], Any]] | None = None):
        self.slots = _slot_names(cls)
        self.has_dict = any("__dict__" in c.__dict__ for c in cls.__mro__)
        # Attributes keyed by what they mean rather than what they hold: name
        # -> function of the object (see LIBRARY_KINDS).
        self.derived = derived

    def _state(self, v):
        d = object.__getattribute__(v, "__dict__") if self.has_dict else None
        slots = tuple([getattr(v, s, MISSING) for s in self.slots])
        return d, slots

    def key(self, w, v):
        ref = w.enter(v)
        if ref is not None:
            return ref
        d, slots = self._state(v)
        if self.derived and d is not None:
            d = {**d, **{k: f(v) for k, f in self.derived.items() if k in d}}
        walk = w.walk
        return (IdRef(type(v)), walk(d), tuple([walk(s) for s in slots]))

    def children(self, w, v):
        d, slots = self._state(v)
        skip = _sink_of(w, d) or () if d is not None else ()
        attrs = [] if d is None else [(f".{k}", x) for k, x in d.items() if k not in skip]
        return attrs + [(f".{n}", s) for n, s in zip(self.slots, slots, strict=True)]

    def node_token(self, v):
        return IdRef(type(v))

    def rebuild(self, r, v, i):
        d, slots = self._state(v)
        walk = r.walk
        if r.in_place:
            # Its own __dict__ in place (a dict), and its slots: around the
            # class's __setattr__, as the state is only lent to the trace.
            r.memo[id(v)] = v
            walk(d)
            for name, s in zip(self.slots, slots, strict=True):
                ns = walk(s)
                if ns is not s:
                    r.put(ATTR, v, name, ns)
            return v
        cls = type(v)
        new = object.__new__(cls) if cls.__new__ is object.__new__ else copy.copy(v)
        r.memo[id(v)] = new
        nd = walk(d)
        if nd is not None:
            object.__getattribute__(new, "__dict__").update(nd)
        for name, s in zip(self.slots, slots, strict=True):
            ns = walk(s)
            if ns is not MISSING:
                object.__setattr__(new, name, ns)
        return new


_LOG = logging.getLogger("stablejit")
_WARNED: set[type] = set()
_WARN_LOCK = threading.Lock()


class _Opaque(Kind):
    """Objects with no readable state: hashed through cloudpickle, else identity."""

    name = "opaque object"

    def key(self, w, v):
        import cloudpickle

        try:
            data = cloudpickle.dumps(v, protocol=5)
        except Exception as e:  # noqa: BLE001 - any pickling failure means "cannot read"
            with _WARN_LOCK:
                first = type(v) not in _WARNED
                _WARNED.add(type(v))
            if first:
                # A log record, not a warning: suites that turn warnings into
                # errors would fail on code that runs (see _explain).
                _LOG.warning(
                    "stablejit cannot read the state of %s objects (%.80s); they are keyed "
                    "by identity, so mutating one in place is not seen.",
                    type(v).__qualname__,
                    e,
                )
            return IdRef(v)
        return ("pickled", type(v), xxhash.xxh3_128_digest(data))


# ---------------------------------------------------------------- the table

_LEAF = _Leaf()
_IDENTITY = _Identity()
_IDENTITY_REF = _IdentityRef()
_VALUE = _Value()
_FUNCTION = _Function()
_PYTREE = _Pytree()
_OPAQUE = _Opaque()

TABLE: dict[type, Kind] = {
    int: _Scalar(),
    bool: _Scalar(),
    str: _Str(),
    bytes: _Scalar(),
    float: _Float(),
    complex: _Complex(),
    type(None): _NoneKind(),
    type(...): _IDENTITY,
    type(NotImplemented): _IDENTITY,
    tuple: _Tuple(),
    list: _List(),
    dict: _Dict(),
    set: _Set(),
    frozenset: _Set(),
    types.FunctionType: _FUNCTION,
    types.MethodType: _Method(),
    np.dtype: _VALUE,
    range: _VALUE,
    type(jax.jit(lambda x: x)): _Jitted(),
}

_ARRAY_BASES = (jax.Array, np.ndarray, _core.Tracer)
_IDENTITY_BASES = (
    type,
    types.ModuleType,
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    np.ufunc,
    _ext_core.Primitive,
)
_VALUE_BASES = (
    enum.Enum,
    np.dtype,
    jax.sharding.Sharding,
    jax.sharding.Mesh,
    jax.sharding.PartitionSpec,
    jax.ShapeDtypeStruct,
    type(jax.devices()[0]),
    slice,
)

_TABLE_LOCK = threading.Lock()


KEYS: dict[type, Any] = {}
"""``TABLE`` with each kind's bound ``key`` method: the hot path's dispatch."""


def register_kind(cls: type, kind: Kind) -> None:
    """Makes ``kind`` the kind of every value of exact type ``cls``."""
    with _TABLE_LOCK:
        TABLE[cls] = kind
        KEYS[cls] = kind.key


for _cls, _kind in list(TABLE.items()):
    register_kind(_cls, _kind)


def _eq_is_identity(cls) -> bool:
    # Builtin functions compare by (self, C function): identity in effect.
    return cls.__eq__ is object.__eq__ or issubclass(
        cls, (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType)
    )


def _is_pytree_node(cls, v) -> bool:
    try:
        children, treedef = _flatten_one_level(v)
    except Exception:  # noqa: BLE001 - a failing flatten means "not a usable node"
        return False
    return not (
        treedef.num_nodes == 1 and treedef.num_leaves == 1 and children and children[0] is v
    )


class _Constant(Kind):
    """Values that never change what is traced, whatever they are."""

    name = "ignored"

    def key(self, w, v):
        return type(v)


LIBRARY_KINDS: dict[str, Kind | Callable[[type], Kind]] = {
    # A flax module's counter id, fresh for every module object. Flax uses it
    # only to preserve sharing between modules, which the walk already sees
    # as object identity; keyed by value, every rebuilt model would miss.
    "flax.ids.FlaxId": _Constant(),
    # flax's lifted jit passes its scope functions to the traced function
    # through this thread-local stack, pushed around each call, and keys what
    # they depend on itself, in a static "fingerprint" argument: flax relies
    # on jax.jit not keying it. Keyed, every call of an nn.jit method missed.
    "flax.core.lift.TransformContext": _Constant(),
    # What a flax Scope keeps of the trace it was made under, to refuse use
    # under another: a new object per trace (every jax.grad), never an input
    # to the computation.
    "jax._src.core.OpaqueTraceState": _Constant(),
    # transformers stores hash(config), which PYTHONHASHSEED changes, to tell
    # later whether the user edited the config: keyed by that meaning, so a
    # model's key is the same in every process (persistent mode).
    "transformers.generation.configuration_utils.GenerationConfig": lambda cls: _Object(
        cls, derived={"_original_object_hash": lambda c: c._original_object_hash == hash(c)}
    ),
}
"""Kinds of library types, by qualified name, so that the library need not
be imported to declare them; a function of the class makes one kind per class."""

USER_KINDS: dict[type, Kind] = {}
"""Kinds users declared (see register_type), for a class and its subclasses."""
_CLASSIFIED: set[type] = set()  # types classify() chose a kind for


def register_user_kind(cls: type, kind: Kind | None) -> None:
    """Makes ``kind`` the kind of ``cls`` and its subclasses (None: the
    default), replacing what classify() had chosen for them."""
    with _TABLE_LOCK:
        if kind is None:
            USER_KINDS.pop(cls, None)
        else:
            USER_KINDS[cls] = kind
        for t in [t for t in _CLASSIFIED | {cls} if issubclass(t, cls)]:
            _CLASSIFIED.discard(t)
            TABLE.pop(t, None)
            KEYS.pop(t, None)


def _plain_kind(cls, v) -> Kind:
    """The kind of a value that is not a registered pytree node, by its class."""
    if issubclass(cls, (int, str, bytes)):
        return _Scalar()
    if issubclass(cls, (list, dict, tuple)):
        base = list if issubclass(cls, list) else dict if issubclass(cls, dict) else tuple
        return _Subclass(cls, TABLE[base])
    if _defines_equality(cls):
        return _OwnEquality(cls)
    if hasattr(v, "__dict__") or _slot_names(cls):
        return _Object(cls)
    return _OPAQUE


def _defines_equality(cls) -> bool:
    """Whether ``cls`` was written to be a key: one class body defines both
    ``__eq__`` and ``__hash__`` (dataclasses' generated ones do not count)."""
    for c in cls.__mro__:
        if c is object:
            return False
        eq = c.__dict__.get("__eq__")
        if eq is None:
            continue
        code = getattr(eq, "__code__", None)
        generated = code is None or code.co_filename.startswith("<")
        return not generated and c.__dict__.get("__hash__") is not None
    return False


class _OwnEquality(Kind):
    """Objects of a class written to be a key (flax's ``_HashableProxy``, a
    config with ``__eq__``/``__hash__``).

    Inside a static argument (``w.static``) they are keyed by their own
    equality, as ``jax.jit`` keys static arguments: the class says what
    matters. Anywhere else, and where they cannot be hashed, by their state,
    as plain objects: a flax ``Scope``'s equality is the identity of the
    variables it holds, which are arrays to lift.
    """

    name = "object"
    cyclic = True

    def __init__(self, cls):
        self.state = _Object(cls)

    def key(self, w, v):
        if w.static:
            try:
                hash(v)
            except Exception:  # noqa: BLE001 - a failing __hash__: not a key after all
                pass
            else:
                return (IdRef(type(v)), v)
        return self.state.key(w, v)

    def rebuild(self, r, v, i):
        return self.state.rebuild(r, v, i)  # only values keyed by state hold leaves

    def children(self, w, v):
        return self.state.children(w, v)

    def node_token(self, v):
        return self.state.node_token(v)


_NOT_PYTREE: dict[type, Kind] = {}


def _not_a_pytree(v) -> Kind:
    """The kind ``v`` would have if its class were not a pytree node."""
    cls = type(v)
    kind = _NOT_PYTREE.get(cls)
    if kind is None:
        kind = _NOT_PYTREE[cls] = _plain_kind(cls, v)
    return kind


def classify(v: Any) -> Kind:
    """Returns (and remembers per type) the kind of ``v``."""
    cls = type(v)
    kind = TABLE.get(cls)
    if kind is not None:
        return kind
    user = next((USER_KINDS[c] for c in cls.__mro__ if c in USER_KINDS), None)
    if user is None:
        user = LIBRARY_KINDS.get(f"{cls.__module__}.{cls.__qualname__}")
        if user is not None and not isinstance(user, Kind):
            user = user(cls)
    if user is not None:
        kind = user
    elif issubclass(cls, _ARRAY_BASES):
        kind = _LEAF
    elif issubclass(cls, np.generic):
        kind = _NumpyScalar()
    elif issubclass(cls, _IDENTITY_BASES):
        kind = _IDENTITY if _eq_is_identity(cls) else _IDENTITY_REF
    elif issubclass(cls, _VALUE_BASES):
        kind = _VALUE
    elif issubclass(cls, functools.partial):
        kind = _Partial()
    elif issubclass(cls, types.FunctionType):
        kind = _FUNCTION
    elif issubclass(cls, (float,)):
        kind = _Float()
    elif _is_pytree_node(cls, v):
        kind = _PYTREE
    else:
        kind = _plain_kind(cls, v)
    register_kind(cls, kind)
    with _TABLE_LOCK:
        _CLASSIFIED.add(cls)
    return kind


# The fast path re-checks keys that the kinds above built, so it imports them:
# it comes last (the package's __init__ imports this module first).
from ._fastpath import FAST_PATH_TRIES, FastPath, known_key, remember  # noqa: E402
