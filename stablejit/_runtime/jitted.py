"""``StableJitted``: the callable ``stable_jit`` returns.

It holds a call function, the general one (:mod:`.calls`) or a redefined
closure's own (:mod:`.hot`), with the callable and its options, and is
called as ``call(fn, opts, *args, **kwargs)`` with no Python frame of its
own: its base is the accelerator's ``Jitted`` where that is built, else a
``functools.partial``. Its methods (``lower``, ``trace``, ``cache_info``,
...) and how another callable's key sees it are here; the call path is
in :mod:`.calls`, a miss in :mod:`.miss`, the key's layout in :mod:`.keys`.
"""

from __future__ import annotations

import functools
import types
import weakref
from collections.abc import Callable
from typing import Generic, ParamSpec, TypeVar

import jax

# JAX's own wrap-time checks and naming, so that what is refused, and how,
# and the names a wrapper wears are jax.jit's (private, but in place since
# before the oldest JAX stablejit supports).
from jax._src.api_util import check_callable as _jax_check_callable
from jax._src.api_util import fun_signature, resolve_argnums
from jax._src.util import fun_name

from .._diagnostics import stats
from .._diagnostics.stats import CacheInfo
from .._fingerprint.code import INFO as CODE_INFO
from .._fingerprint.kind import Kind, register_kind
from .._fingerprint.rebuild import RebuildMismatch
from .._native import NATIVE
from .._registry import Memo
from . import cache, calls, miss
from .calls import boundary, general, stage
from .canonical import Restructured, entry_point
from .options import Options
from .stages import Lowered, Traced, bound
from .statics import release, signature_code

P = ParamSpec("P")
R = TypeVar("R")
_FunctionType = types.FunctionType


def check_callable(fun) -> None:
    """Refuses what ``jax.jit`` refuses when wrapping, with its messages: a
    non-callable, a staticmethod, a generator function."""
    _jax_check_callable(fun)


_VALIDATED = Memo(256)  # (code, options) → None: argnums/argnames already checked


def check_argnums(fun, opts: Options) -> None:
    """Refuses, as ``jax.jit(fun, ...)`` does when wrapping, static or donated
    argument numbers and names that ``fun``'s signature does not have, and
    names both static and donated (once per code and options: a function
    that defines its jitted function inside wraps on every call)."""
    user = opts.user
    if not any(k.endswith(("argnums", "argnames")) for k in user):
        return
    code = signature_code(fun)
    memo_key = (code, opts) if code is not None else None
    if memo_key is not None and memo_key in _VALIDATED:
        return
    resolve_argnums(
        fun,
        fun_signature(fun),
        user.get("donate_argnums"),
        user.get("donate_argnames"),
        user.get("static_argnums"),
        user.get("static_argnames"),
    )
    if memo_key is not None:
        _VALIDATED.put(memo_key, None)


_COPIED: dict[str, Callable] = {
    "__wrapped__": lambda fun: fun,
    "__name__": fun_name,
    "__qualname__": lambda fun: getattr(fun, "__qualname__", fun_name(fun)),
    "__doc__": lambda fun: getattr(fun, "__doc__", "") or "",
    "__module__": lambda fun: getattr(fun, "__module__", "<unknown module>"),
    "__annotations__": lambda fun: getattr(fun, "__annotations__", {}),
}
"""What ``jax.jit``'s ``functools.wraps`` copies onto its wrapper, besides the
function's ``__dict__``: each read from the function."""

_FILLED: weakref.WeakSet = weakref.WeakSet()
"""The wrappers whose instance dict holds what wraps would have copied (see
``StableJitted.__dict__``): from then on it is their attributes' only source,
so that one deleted stays deleted, as on ``jax.jit``'s wrapper."""


class _PartialBase(functools.partial):
    """The pure path's base of StableJitted: ``partial(call, fn, opts)``."""

    __slots__ = ()

    @property
    def _call(self):
        return self.func

    @property
    def _fun(self):
        return self.args[0]

    @property
    def _opts(self):
        return self.args[1]


class StableJitted(_PartialBase if NATIVE is None else NATIVE.Jitted, Generic[P, R]):
    """A callable compiled like ``jax.jit``, cached by structure.

    Returned by :func:`stable_jit`; see there. Underneath it holds
    stablejit's call function, the callable and its options (made by
    ``stable_jit``, not by hand), so that a call reaches the call function (a
    redefined closure's own, once its checks are compiled) with no Python
    frame of the wrapper's own in between.

    Example:
        >>> import jax.numpy as jnp
        >>> from stablejit import stable_jit
        >>> f = stable_jit(lambda x: x * 2)
        >>> f.lower(jnp.ones(2)).compile()(jnp.ones(2))
        Array([2., 2.], dtype=float32)
    """

    __slots__ = ()

    # What functools.wraps would have copied onto the wrapper (as jax.jit's
    # does), read from the function when asked: one is made per call of a
    # function that defines its jitted function inside, and copies nothing
    # until its dict is read or an attribute deleted.
    def __getattr__(self, name):
        if self in _FILLED:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        fun = self._fun
        read = _COPIED.get(name)
        if read is not None:
            return read(fun)
        try:
            return getattr(fun, "__dict__", {})[name]
        except Exception:  # noqa: BLE001 (wraps copies what it can read)
            raise AttributeError(
                f"{type(self).__name__!r} object has no attribute {name!r}"
            ) from None

    @property
    def __dict__(self):
        # The instance's own dict, first filled as wraps would have filled it
        # (what was set on the wrapper since stays).
        own = _INSTANCE_DICT(self)
        if self not in _FILLED:
            for k, v in _wrapped_dict(self._fun).items():
                own.setdefault(k, v)
            _FILLED.add(self)
        return own

    def __delattr__(self, name):
        self.__dict__  # noqa: B018 - filled first: what is deleted must be there
        object.__delattr__(self, name)

    def __getstate__(self):
        # As jax.jit's wrapper describes itself (its function and name); it
        # pickles by __reduce__.
        fn, opts = self._fun, self._opts
        return {"version": 1, "function_name": fun_name(fn), "fun": fn, "options": opts.user}

    def __repr__(self):
        # jax.jit's, word for word: code that prints or parses a jitted
        # function's repr sees the same. The counters are cache_info()'s, and
        # what the key is made of, stablejit.describe's.
        try:
            return f"<PjitFunction of {self.__wrapped__!r}>"
        except Exception:  # noqa: BLE001 - as jax.jit's: a repr never fails
            return "<PjitFunction>"

    def __reduce__(self):
        return wrap, (self._fun, self._opts)

    def __get__(self, obj, objtype=None):
        # Decorating a method: bind like a function would, then jit the bound
        # method (keyed by the structure of ``obj``).
        if obj is None:
            return self
        return made(types.MethodType(self._fun, obj), self._opts)

    @entry_point
    def _traced(self, args, kwargs) -> Traced:
        # The staging path of a call that missed (see .calls.stage), then
        # its Traced, which lower() and eval_shape() are made from, as
        # jax.jit makes its stages from its jit_trace.
        fn, opts = self._fun, self._opts
        try:
            s = stage(fn, opts, args, kwargs)
        except RebuildMismatch as e:
            if type(e) is Restructured:  # switched to arguments by structure: once more
                return self._traced(args, kwargs)
            miss.mismatched(fn, opts, e)
            return bound(miss.uncached(fn, opts).trace(*args, **kwargs), ())
        finally:
            stats.done_compiling()
        if s.plain is not None:
            return bound(s.plain.trace(*args, **kwargs), ())
        release(s.args, s.kwargs)
        return bound(s.traced, s.leaves)

    @boundary
    def trace(self, *args, **kwargs) -> Traced:
        """Traces like ``jax.jit(f).trace``: a ``jax.stages.Traced`` that, like
        the ``Lowered`` and ``Compiled`` made from it, takes and describes the
        user's arguments only (the lifted arrays are bound to it)."""
        return self._traced(args, kwargs)

    @boundary
    def lower(self, *args, **kwargs) -> Lowered:
        """Lowers like ``jax.jit(f).lower``: ``trace(...).lower()``, see :meth:`trace`."""
        return self._traced(args, kwargs).lower()

    @boundary
    def eval_shape(self, *args, **kwargs):
        """Output shapes and dtypes, like ``jax.jit(f).eval_shape``."""
        return jax.tree_util.tree_map(
            _shape_dtype, self._traced(args, kwargs).out_info, is_leaf=_has_shape
        )

    def clear_cache(self) -> None:
        """Drops the compiled entries of this function (all redefinitions of
        it), and its counters."""
        ftag = miss.function_tag(self._fun, self._opts)
        cache.clear(ftag)
        stats.forget(ftag)

    def cache_info(self) -> CacheInfo:
        """The counters of this function, all its redefinitions together."""
        return stats.cache_info(cache.live_entries(), miss.function_tag(self._fun, self._opts))

    def _cache_size(self) -> int:
        # jax.jit's wrapper counts its compiled variants here; private, but
        # tests (JAX's own, libraries') read it off whatever jax.jit returned.
        return self.cache_info().entries


def _has_shape(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype")


def _shape_dtype(out):
    """A stage's output info as ``jax.jit``'s ``eval_shape`` gives it (JAX
    before 0.7 described a ``Traced``'s outputs with its own ``OutInfo``)."""
    if isinstance(out, jax.ShapeDtypeStruct):
        return out
    return jax.ShapeDtypeStruct(out.shape, out.dtype, sharding=out.sharding)


class _FromWrapped(str):
    """A class attribute that, read on an instance, is the wrapped function's
    (``__doc__``, ``__module__``, as ``functools.wraps`` would have copied
    them); read on the class, the class's own: a str, because ``type`` hands
    out its ``__module__`` as it is stored."""

    def __new__(cls, own: str, read: Callable):
        self = super().__new__(cls, own)
        self.read = read
        return self

    def __get__(self, obj, objtype=None):
        return str(self) if obj is None else self.read(obj._fun)


StableJitted.__doc__ = _FromWrapped(StableJitted.__doc__, _COPIED["__doc__"])
StableJitted.__module__ = _FromWrapped(StableJitted.__module__, _COPIED["__module__"])
_INSTANCE_DICT = next(
    c.__dict__["__dict__"] for c in StableJitted.__mro__[1:] if "__dict__" in c.__dict__
).__get__


def _wrapped_dict(fun) -> dict:
    """What ``jax.jit``'s ``functools.wraps`` puts in its wrapper's ``__dict__``."""
    try:
        copied = {k: read(fun) for k, read in _COPIED.items()}
        return {**getattr(fun, "__dict__", {}), **copied}
    except Exception:  # noqa: BLE001 (as wraps: nothing, if it cannot read the function)
        return {}


def wrap(fun: Callable, opts: Options) -> StableJitted:
    """``fun`` compiled with ``opts`` (checked)."""
    check_callable(fun)
    check_argnums(fun, opts)
    return made(fun, opts)


def made(fun: Callable, opts: Options) -> StableJitted:
    """A :class:`StableJitted` of ``fun`` (unchecked): holding the call
    function of ``fun``'s code if its fast path has one, else the general
    :func:`.calls.call` (or, with static arguments, ``call_statics``)."""
    call = general(opts)
    if call is calls.call:
        call = fast_call(fun) or call
    return jitted_of(call, fun, opts)


def fast_call(fun: Callable):
    """``fun``'s code's fast-path call function (see :mod:`.hot`), or None."""
    if type(fun) is _FunctionType:
        info = CODE_INFO.get(id(fun.__code__))
        if info is not None:
            return info.fast.call
    return None


def jitted_of(call, fun: Callable, opts: Options) -> StableJitted:
    """The :class:`StableJitted` of ``(call, fun, opts)``."""
    self = StableJitted(call, fun, opts)
    if NATIVE is None:
        # A partial without a __dict__ of its own is unwrapped by
        # functools.partial(self, x).
        _INSTANCE_DICT(self)
    return self


class _StableKind(Kind):
    """A ``stable_jit`` wrapper reached from another callable."""

    name = "stable_jit function"

    def key(self, w, f):
        return (StableJitted, w.walk(f._fun), f._opts.key)

    def children(self, w, f):
        return [("stable_jit of", f._fun)]

    def node_token(self, f):
        return f._opts.key

    def rebuild(self, r, f, i):
        return made(r.walk(f._fun), f._opts)


if NATIVE is not None:
    # Its base's vectorcall (Python gives a mutable class that only from 3.12
    # on) and dealloc (one is made and dropped per call of a function that
    # defines its jitted function inside).
    NATIVE.adopt(StableJitted)

register_kind(StableJitted, _StableKind())
