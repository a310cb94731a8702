r"""Arguments compared by structure, for entries whose arguments hold callables.

jax.jit compares a pytree argument's auxiliary data with ``==``: a training
state whose ``apply_fn`` or ``tx`` (static fields) is a fresh closure each
epoch retraces each epoch. An entry that retraces with such an argument
passes its arguments as :class:`ArgTree`\ s from then on, that call made
again so (see the runtime's ``canonical.Restructured``): the same leaves, and
auxiliary data compared by fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from .._fingerprint.classify import ARRAY_BASES
from .._fingerprint.walk import KeyWalker, Lift
from .._registry import Memo
from .statics import Box


class Static:
    """Auxiliary data of a pytree node, equal when the keys (fingerprints) are.

    The node of an :class:`ArgTree` here, and of a ``StableFunction``
    (``_stable.py``). ``skeleton`` is the first structure seen of that key, to
    unflatten with: an argument's treedef, or a function with every leaf a
    hole, so JAX's caches, which keep auxiliary data, keep no user array
    alive; ``lift``, the scalars its leaves were lifted with.
    """

    __slots__ = ("key", "skeleton", "lift", "_hash")

    def __init__(self, key, skeleton, lift: Lift = None):
        self.key = key
        self.skeleton = skeleton
        self.lift = lift
        self._hash = hash(key)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return type(other) is Static and (self is other or self.key == other.key)

    def __repr__(self):
        return f"<structure of {getattr(self.skeleton, '__qualname__', self.skeleton)!r}>"


class ArgTree:
    __slots__ = ("static", "leaves")

    def __init__(self, static: Static, leaves):
        self.static = static
        self.leaves = leaves


jax.tree_util.register_pytree_node(
    ArgTree, lambda t: (t.leaves, t.static), lambda static, leaves: ArgTree(static, leaves)
)


def _structure_key(treedef) -> tuple | None:
    """Each node's type, fingerprinted auxiliary data and arity, in order;
    None if auxiliary data holds arrays (they would have to be lifted)."""
    w = KeyWalker()
    out = []
    todo = [treedef]
    while todo:
        td = todo.pop()
        data = td.node_data()
        if data is None:
            out.append(None)
            continue
        kids = td.children()
        out.append((data[0], w.walk(data[1]), len(kids)))
        todo.extend(reversed(kids))
    return None if w.leaves else tuple(out)


_STATICS = Memo(256)
"""Structure → its static part, so that equal structures share one."""
_PASSED_AS_IS = frozenset({int, float, bool, complex, type(None), Box})


def _as_tree(a):
    t = type(a)
    if t in _PASSED_AS_IS or issubclass(t, ARRAY_BASES):
        return a
    leaves, treedef = jax.tree_util.tree_flatten(a)
    key = _structure_key(treedef)
    if key is None:
        return a
    static = _STATICS.get(key)
    if static is None:
        static = _STATICS.put(key, Static(key, treedef))
    return ArgTree(static, leaves)


def by_structure(jitted: Callable, n_leaves: int) -> Callable:
    """``jitted``, called with its arguments (after ``n_leaves`` lifted
    leaves) compared by structure."""

    def ready(*args, **kwargs):
        args = args[:n_leaves] + tuple([_as_tree(a) for a in args[n_leaves:]])
        if kwargs:
            kwargs = {k: _as_tree(v) for k, v in kwargs.items()}
        return jitted(*args, **kwargs)

    return ready


def _value(a):
    return a.static.skeleton.unflatten(a.leaves) if type(a) is ArgTree else a


def unwrap(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """At trace time: the arguments :func:`by_structure` wrapped, unwrapped."""
    args = tuple([_value(a) for a in args])
    if kwargs:
        kwargs = {k: _value(v) for k, v in kwargs.items()}
    return args, kwargs


def aux_holds_callables(tree) -> bool:
    """Whether a pytree node of ``tree`` holds a callable in its auxiliary
    data (directly, or in a tuple or dict there)."""
    todo = [jax.tree_util.tree_structure(tree)]
    while todo:
        td = todo.pop()
        data = td.node_data()
        if data is not None:
            aux = data[1]
            parts = (
                aux.values() if isinstance(aux, dict) else aux if isinstance(aux, tuple) else [aux]
            )
            for p in parts:
                items = p if isinstance(p, tuple) else (p,)
                if any(callable(x) and not isinstance(x, type) for x in items):
                    return True
        todo.extend(td.children())
    return False
