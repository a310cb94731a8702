"""Static arguments, keyed by structure like everything a function closes over.

``jax.jit`` keys a static argument by its ``__hash__``/``__eq__``, so a fresh
``optax.adam(1e-3)`` (a NamedTuple of new closures) or a user function passed
as a static argument misses every time, and an object mutated in place hits a
stale trace. ``stable_jit`` walks static arguments with the function: they
join its key (arrays inside them are lifted), and jax.jit sees each one in a
:class:`Box` that equals every other box — the key has already told values
apart — and carries the value to the trace.
"""

from __future__ import annotations

import inspect
import types
import weakref
from typing import Any

import jax
import numpy as np

from .._fingerprint.kind import Kind, keys, register_kind
from .._registry import Memo

_ARRAYS = (jax.Array, np.ndarray)


class Box:
    """A static argument as the canonical ``jax.jit`` sees it."""

    __slots__ = ("value", "label")

    def __init__(self, value, label: str):
        self.value = value
        self.label = label

    def __hash__(self):
        return 0x5EED

    def __eq__(self, other):
        return type(other) is Box

    def __repr__(self):
        return "<static argument, keyed by stablejit>"


class WithStatics:
    """What a call with static arguments is keyed on: the function and the
    static values, each labelled with the parameter it was passed as."""

    __slots__ = ("fn", "values", "labels")

    def __init__(self, fn, values: tuple, labels: tuple):
        self.fn = fn
        self.values = values
        self.labels = labels


class _WithStaticsKind(Kind):
    name = "call"

    def key(self, w, s):
        fn = w.walk(s.fn)
        outer, w.static = w.static, True
        try:
            return (WithStatics, s.labels, fn, keys(w, s.values))
        finally:
            w.static = outer

    def rebuild(self, r, s, i):
        walk = r.walk
        fn = walk(s.fn)
        return WithStatics(fn, tuple([walk(v) for v in s.values]), s.labels)

    def children(self, w, s):
        return [("function", s.fn)] + [
            (f"static argument {label}", v) for label, v in zip(s.labels, s.values, strict=True)
        ]


register_kind(WithStatics, _WithStaticsKind())


def signature_code(fn) -> types.CodeType | None:
    """The code object that alone gives ``fn``'s signature, to remember what
    the signature says by; None where it does not: a wrapper (functools.wraps,
    ``jax.named_call``) shares one code across the functions it wraps, whose
    signatures ``inspect`` reads through ``__wrapped__``."""
    if type(fn) is not types.FunctionType:
        return None
    own = fn.__dict__
    return None if "__wrapped__" in own or "__signature__" in own else fn.__code__


class StaticSlots:
    """Which of a call's arguments are static, resolved like ``jax.jit`` does:
    ``static_argnames`` also name positional uses and ``static_argnums`` keyword
    uses, through the function's signature, unless both are given (``infer``
    false: an empty ``static_argnames=()`` with ``static_argnums`` says a
    keyword use is not static)."""

    __slots__ = ("nums", "names", "infer", "_memo", "_wrappers")

    def __init__(self, nums: tuple[int, ...], names: tuple[str, ...], infer: bool = True):
        self.nums = nums
        self.names = names
        self.infer = infer
        self._memo = Memo(256)  # (code, type) → resolved slots
        # A wrapper's slots, by the wrapper itself, while it lives: what
        # jax.jit resolves once when wrapping, not again on every call.
        self._wrappers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def resolved(self, fn) -> tuple[tuple[int, ...], frozenset[str]]:
        """``(numbers, names)`` of ``fn``'s static parameters, as ``jax.jit``
        resolves them from its signature."""
        code = signature_code(getattr(fn, "__func__", fn))
        memo_key = (code, type(fn)) if code is not None else None
        by_object = memo_key is None and type(fn) is types.FunctionType
        if memo_key is not None:
            out = self._memo.get(memo_key)
        else:
            out = self._wrappers.get(fn) if by_object else None
        if out is not None:
            return out
        nums, names = self.nums, self.names
        if self.infer:
            try:
                params = list(inspect.signature(fn).parameters.values())
            except (TypeError, ValueError):
                params = []
            pk = inspect.Parameter.POSITIONAL_OR_KEYWORD
            if names:
                nums = tuple(i for i, p in enumerate(params) if p.kind == pk and p.name in names)
            else:
                names = tuple(p.name for i, p in enumerate(params) if p.kind == pk and i in nums)
        out = (nums, frozenset(names))
        if memo_key is not None:
            self._memo.put(memo_key, out)
        elif by_object:
            self._wrappers[fn] = out
        return out

    def box(self, fn, args: tuple, kwargs: dict) -> tuple[WithStatics, tuple, dict]:
        """The call keyed as a whole, and its arguments with statics boxed.

        Boxes are in argument order then keyword order sorted by name, the
        order :func:`unbox` reads them back in.
        """
        nums, names = self.resolved(fn)
        n = len(args)
        positions = sorted({i % n for i in nums if -n <= i < n}) if n else []
        args = list(args)
        values, labels = [], []
        for i in positions:
            _refuse_array(args[i])
            values.append(args[i])
            labels.append(str(i))
            args[i] = Box(args[i], labels[-1])
        if kwargs and names:
            kwargs = dict(kwargs)
            for k in sorted(kwargs):
                if k in names:
                    _refuse_array(kwargs[k])
                    values.append(kwargs[k])
                    labels.append(repr(k))
                    kwargs[k] = Box(kwargs[k], labels[-1])
        return WithStatics(fn, tuple(values), tuple(labels)), tuple(args), kwargs


def _refuse_array(value) -> None:
    """Refuses an array passed as a static argument, as ``jax.jit`` does (it
    cannot hash one), with its error: other unhashable values are keyed by
    structure here, but an array is the computation's input, and a static
    one would be keyed by its contents."""
    if isinstance(value, _ARRAYS):
        try:
            hash(value)
        except TypeError as e:
            raise ValueError(
                "Non-hashable static arguments are not supported. An error occurred while "
                f"trying to hash an object of type {type(value)}, {value}. The error was:\n"
                f"{type(e).__name__}: {e}\n"
            ) from None


def hash_as_jax_jit(values: tuple) -> None:
    """Hashes static arguments as ``jax.jit`` does, so that an error a
    ``__hash__`` raises propagates as it does there. Called on a miss only:
    the key, not the hash, tells values apart, and a value whose hash raised
    never reached the cache. Unhashable values (a TypeError), which
    ``jax.jit`` refuses, are keyed by structure here, and pass."""
    for v in values:
        try:
            hash(v)
        except TypeError:
            pass


def unbox(fn, args: tuple, kwargs: dict) -> tuple[Any, WithStatics | None]:
    """At trace time: the call as :meth:`StaticSlots.box` keyed it, or None
    without static arguments."""
    boxes = [a for a in args if type(a) is Box]
    boxes += [kwargs[k] for k in sorted(kwargs) if type(kwargs[k]) is Box]
    if not boxes:
        return None
    return WithStatics(fn, tuple([b.value for b in boxes]), tuple([b.label for b in boxes]))


def rebox(args: tuple, kwargs: dict, values) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with the boxes replaced by ``values``, in order."""
    it = iter(values)
    args = tuple([next(it) if type(a) is Box else a for a in args])
    if kwargs:
        kwargs = dict(kwargs)
        for k in sorted(kwargs):
            if type(kwargs[k]) is Box:
                kwargs[k] = next(it)
    return args, kwargs


def release(args: tuple, kwargs: dict) -> None:
    """Empties the boxes of a call that has returned: JAX's own cache keeps the
    first call's boxes, and must not keep the user's values alive with them."""
    for a in args:
        if type(a) is Box:
            a.value = None
    for a in kwargs.values():
        if type(a) is Box:
            a.value = None


_BUILT_IN_NODES = frozenset({tuple, list, dict, type(None)})
_BUDGET = 10_000  # objects looked at per call, at most: a replay's check stays cheap


def compared_by_identity(args: tuple, kwargs: dict) -> list:
    """What ``jax.jit`` would compare by identity in a call's arguments: the
    objects whose type keeps ``object.__eq__`` (functions, partials, classes,
    plain instances) among its static arguments' values and in the pytree
    structures (node types, auxiliary data) of all of them. A new one is a
    retrace under ``jax.jit`` (a fresh closure in diffrax's term, passed
    static by equinox's filter_jit) where stablejit, keyed by structure,
    hits: :mod:`.trace_warnings` replays a trace's warnings for it. Objects
    without weak references are left out: they could only be remembered by
    keeping them alive."""
    out: list = []
    todo: list = [(args, kwargs)]
    budget = _BUDGET
    while todo and budget > 0:
        try:
            leaves, treedef = jax.tree_util.tree_flatten(todo.pop())
        except Exception:  # noqa: BLE001 (auxiliary data jax.jit never flattens)
            continue
        budget -= len(leaves) + treedef.num_nodes
        leaves += _structure(treedef, todo)
        for x in leaves:
            t = type(x)
            if t is Box:
                todo.append(x.value)
            elif t is types.MethodType:  # equal when self and function are
                todo.append((x.__self__, x.__func__))
            elif t is jax.tree_util.PyTreeDef:
                leaves += _structure(x, todo)  # (looked at later in this loop)
            elif t.__eq__ is object.__eq__ and _weakly(x):
                out.append(x)
    return out


def _structure(treedef, todo: list) -> list:
    """The node types of ``treedef`` (to be looked at as leaves), their
    auxiliary data queued on ``todo`` (to be flattened)."""
    types_, nodes = [], [treedef]
    while nodes:
        td = nodes.pop()
        data = td.node_data()
        if data is not None:
            if data[0] not in _BUILT_IN_NODES:
                types_.append(data[0])
            if data[1] is not None:
                todo.append(data[1])
        nodes.extend(td.children())
    return types_


def _weakly(x) -> bool:
    try:
        weakref.ref(x)
    except TypeError:
        return False
    return True
