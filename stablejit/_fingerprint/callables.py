"""Kinds of callables: Python functions, bound methods, partials, ``jax.jit``s."""

from __future__ import annotations

import types

import jax

from .._originals import JIT
from .code import INFO, code_info
from .guards import FunctionGuard
from .kind import NO_GUARD, Kind, ref_key
from .parts import (
    ATTRIBUTES,
    CELL,
    CHAIN,
    DEFAULTS,
    GLOBAL,
    KWDEFAULTS,
    SUNK,
    chain_owner,
    places,
)
from .places import CELL as CELL_PLACE
from .places import GLOBAL as GLOBAL_PLACE
from .records import FAST_PATH_TRIES, Record, known_key, remember
from .sinks import sink_key


def _walk_named(w, v):
    """Walks the value of a variable named in ``lift_scalars``: if it is a
    number, it is lifted (see :mod:`.values`); numbers inside containers it
    holds are not, so that what is lifted can be read off the names."""
    if type(v) not in (int, float, complex):
        return w.walk(v)
    w.name_ok = True
    try:
        return w.walk(v)
    finally:
        w.name_ok = False


def _by_identity(fn, info) -> bool:
    """A module-level function of an installed library: keyed by identity."""
    return info.library and fn.__closure__ is None and "<locals>" not in fn.__qualname__


class Function(Kind):
    """Python functions: code digest, then the parts :func:`.parts.places`
    lists, in its order."""

    name = "function"
    cyclic = True

    def key(self, w, fn):
        # w.enter(fn), inlined: this is the hot path of every call.
        seen = w.seen
        ref = seen.get(id(fn))
        if ref is not None:
            return ref_key(ref)
        code = fn.__code__
        info = INFO.get(id(code)) or code_info(code)
        if _by_identity(fn, info):
            # Keyed by identity, before it could take a number in ``seen``:
            # a fast-path match re-checks such children without numbering
            # them, and back references must count the same either way.
            return fn
        seen[id(fn)] = len(seen)
        w.alive.append(fn)
        fast = info.fast
        if w.exact and fast.front is not None:
            key = known_key(fast, fn, w)
            if key is not None:
                return key
        walk = w.walk
        lift = w.lift
        named = lift is not None and lift is not True
        parts = places(fn, info, w)
        n_leaves = len(w.leaves)
        part_keys = []
        defaults = kwdefaults = attributes = None
        gkeys = []
        ckeys = []
        for what, name, holder, v in parts:
            if v is SUNK:
                k = sink_key(holder)
            elif what is CHAIN:
                k = (holder[1], walk(v))
            elif named and name in lift and (what is GLOBAL or what is CELL):
                k = _walk_named(w, v)
            else:
                k = walk(v)
            part_keys.append(k)
            if what is GLOBAL or what is CHAIN:
                gkeys.append(k)
            elif what is CELL:
                ckeys.append(k)
            elif what is DEFAULTS:
                defaults = k
            elif what is KWDEFAULTS:
                kwdefaults = k
            else:
                attributes = k
        key = (info.digest, defaults, kwdefaults, tuple(gkeys), tuple(ckeys), attributes)
        if w.exact and fast.failures < FAST_PATH_TRIES:
            record = Record.build(fn, parts, part_keys, w, key, n_leaves)
            if record is None:  # children a fast path cannot re-check (dicts, objects)
                fast.failures += 1
            else:
                remember(fast, record)
        return key

    def guard(self, v, k, records):
        record = records.get(id(v))
        # Only if its own record gave ``k`` (so re-checks it).
        if record is None or record.key is not k:
            return NO_GUARD
        return FunctionGuard(v.__code__, record)

    def children(self, w, fn):
        info = code_info(fn.__code__)
        if _by_identity(fn, info):
            return []
        code = fn.__code__
        out = []
        for what, name, holder, v in places(fn, info, w):
            if v is SUNK:
                continue
            if what is DEFAULTS:
                params = code.co_varnames[: code.co_argcount]
                names = params[len(params) - len(v) :]
                out += [(f"default argument {n!r}", d) for n, d in zip(names, v, strict=True)]
            elif what is KWDEFAULTS:
                out += [(f"default argument {n!r}", d) for n, d in v.items()]
            elif what is GLOBAL:
                out.append((f"global {name!r}", v))
            elif what is CHAIN:
                out.append((f"global {'.'.join(name[: holder[1] + 1])!r}", v))
            elif what is CELL:
                out.append((f"closure variable {name!r}", v))
            else:
                out += [(f"attribute {k!r}", a) for k, a in v.items()]
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
        parts = places(fn, info, r)
        in_place = r.in_place
        space, cells = (
            (fn.__globals__, fn.__closure__) if in_place else self._private(r, fn, i, info, parts)
        )
        new = types.FunctionType(code, space, fn.__name__, None, cells)
        new.__qualname__ = fn.__qualname__
        r.memo[id(fn)] = new
        walk = r.walk
        own_cells = iter(cells or ())
        # A walk returns a new object only where a leaf was substituted.
        for what, name, holder, v in parts:
            own = next(own_cells) if what is CELL else None
            if v is SUNK:
                continue  # a side channel: not walked by the key either
            nv = walk(v)
            if what is DEFAULTS:
                new.__defaults__ = nv
            elif what is KWDEFAULTS:
                new.__kwdefaults__ = nv
            elif what is ATTRIBUTES:
                new.__dict__.update(nv)
            elif nv is v:
                continue
            elif what is GLOBAL:
                if in_place:
                    r.put(GLOBAL_PLACE, holder, name, nv)
                else:
                    space[name] = nv
            elif what is CHAIN:
                root, depth = holder
                if in_place:
                    r.put(GLOBAL_PLACE, chain_owner(root, name, depth), name[depth], nv)
                else:
                    space[name[0]] = _patched_module(space[name[0]], name[1 : depth + 1], nv)
            elif in_place:
                r.put(CELL_PLACE, holder, name, nv)
            else:
                own.cell_contents = nv
        return new

    @staticmethod
    def _private(r, fn, i, info, parts):
        """``(globals, cells)`` for a copy of ``fn`` that outlives any trace (a
        ``stable()`` skeleton): a copy of the globals dict if a global holds a
        leaf, a fresh cell for each cell that does; the others shared."""
        kids = iter(r.plan.children[i])
        has_leaf = r.plan.has_leaf
        space = fn.__globals__
        cells = []
        for what, name, holder, v in parts:
            leafy = v is not SUNK and has_leaf[next(kids)]
            if what is CELL:
                if leafy and name in info.deref_stores:
                    raise TypeError(
                        f"{fn.__qualname__!r} assigns its closure variable {name!r} "
                        "(nonlocal), which holds an array; a copy of it cannot write "
                        "the array back. Return the new value instead."
                    )
                cells.append(types.CellType() if leafy else holder)
            elif leafy and (what is GLOBAL or what is CHAIN) and space is fn.__globals__:
                if info.global_stores:
                    raise TypeError(
                        f"stablejit cannot lift the arrays in the globals of "
                        f"{fn.__qualname__!r} into a copy: it also assigns the globals "
                        f"{sorted(info.global_stores)}. Pass the arrays as arguments."
                    )
                space = dict(fn.__globals__)
        return space, tuple(cells) or None


def _patched_module(mod, path, value):
    """A shallow copy of module ``mod`` with ``mod.<path>`` set to ``value``."""
    proxy = types.ModuleType(mod.__name__)
    proxy.__dict__.update(mod.__dict__)
    head, *rest = path
    setattr(proxy, head, _patched_module(getattr(mod, head), rest, value) if rest else value)
    return proxy


class Method(Kind):
    name = "bound method"

    def key(self, w, m):
        return (types.MethodType, w.walk(m.__func__), w.walk(m.__self__))

    def rebuild(self, r, m, i):
        return types.MethodType(r.walk(m.__func__), r.walk(m.__self__))

    def children(self, w, m):
        return [("method", m.__func__), ("self", m.__self__)]


class Partial(Kind):
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


class Jitted(Kind):
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
        return JIT(
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

    def guard(self, v, k, records):
        # A jax.jit of a library function (jnp.tanh), keyed by identity: the
        # same object again keys the same, as a jit's function and options
        # are fixed.
        return v if k[1] is v._fun else NO_GUARD
