"""``stable_jit``: ``jax.jit`` keyed on what a function is, not which object it is."""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax

from . import _bake, _cache, _explain, _persist, _sinks, _stats
from ._cache import CACHE
from ._code import _GENERATOR_FLAGS, code_info
from ._code import _INFO as _CODE_INFO
from ._config import config
from ._describe import callables_in, display_name, location, user_function
from ._fingerprint import KeyWalker, Lift, walker
from ._kinds import Kind, register_kind
from ._patch import JIT
from ._statics import StaticSlots, release
from ._stats import CacheInfo

_UNSPECIFIED = object()
_NUMBERS = (int, float, complex)
# Options that place or donate arguments by their pytree structure, which
# passing them by structure (see _stable.by_structure) would change.
_PLACED_OPTIONS = ("in_shardings", "donate_argnums", "donate_argnames")
_FunctionType = types.FunctionType
_JIT_DEFAULTS = {
    "in_shardings": _UNSPECIFIED,
    "out_shardings": _UNSPECIFIED,
    "static_argnums": None,
    "static_argnames": None,
    "donate_argnums": None,
    "donate_argnames": None,
    "keep_unused": False,
    "device": None,
    "backend": None,
    "inline": False,
    "compiler_options": None,
}


def _index_tuple(name, value) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    try:
        out = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be an int or a sequence of ints, got {value!r}") from None
    for i in out:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"{name} must be an int or a sequence of ints, got {value!r}")
    return out


def _name_tuple(name, value) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    try:
        out = tuple(value)
    except TypeError:
        raise TypeError(f"{name} must be a str or a sequence of str, got {value!r}") from None
    for s in out:
        if not isinstance(s, str):
            raise TypeError(f"{name} must be a str or a sequence of str, got {value!r}")
    return out


def _lift_option(value) -> Lift:
    if value is False or value is None:
        return None
    if value is True:
        return True
    if isinstance(value, bool) or not isinstance(value, (str, Iterable)):
        raise TypeError(
            f"lift_scalars must be a bool or a sequence of variable names, got {value!r}"
        )
    return frozenset(_name_tuple("lift_scalars", value))


def _hashable(tree) -> Any:
    leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=lambda x: x is None)
    return (treedef, tuple(leaves))


def _shift(nums: tuple[int, ...], n: int) -> tuple[int, ...]:
    # The canonical function takes the n leaves first; negative indices count
    # from the end and are unaffected.
    return tuple(i + n if i >= 0 else i for i in nums)


class _Options:
    """``jax.jit`` options, validated once, with the kwargs for the canonical jit."""

    __slots__ = (
        "user",
        "key",
        "static_key",
        "broadcast_in_shardings",
        "static_argnums",
        "statics",
        "lift",
    )

    def __init__(self, user: dict):
        unknown = set(user) - set(_JIT_DEFAULTS) - {"lift_scalars"}
        if unknown:
            raise TypeError(f"stable_jit() got unexpected keyword arguments {sorted(unknown)}")
        user = dict(user)
        self.lift = _lift_option(user.pop("lift_scalars", False))
        self.user = user
        opts = {**_JIT_DEFAULTS, **user}
        self.static_argnums = _index_tuple("static_argnums", opts["static_argnums"])
        names = _name_tuple("static_argnames", opts["static_argnames"])
        self.statics = (
            StaticSlots(self.static_argnums, names) if names or self.static_argnums else None
        )
        _index_tuple("donate_argnums", opts["donate_argnums"])
        _name_tuple("donate_argnames", opts["donate_argnames"])
        ins = opts["in_shardings"]
        self.broadcast_in_shardings = not (
            ins is _UNSPECIFIED or ins is None or isinstance(ins, (tuple, list))
        )
        co = opts["compiler_options"]
        if co is not None and not isinstance(co, dict):
            raise TypeError(f"compiler_options must be a dict, got {type(co).__name__}")
        self.key = tuple(
            (
                k,
                _hashable(v)
                if k in ("in_shardings", "out_shardings")
                else tuple(sorted(v.items()))
                if k == "compiler_options" and v is not None
                else v
                if k in ("device", "backend", "keep_unused", "inline")
                else (_index_tuple(k, v) if k.endswith("argnums") else _name_tuple(k, v)),
            )
            for k, v in sorted(user.items())
        )
        # Keys of variants that fell back to static scalars (see _key) differ
        # from lifted ones by this head.
        self.static_key = self.key
        if self.lift is not None:
            self.key += (("lift_scalars", self.lift),)

    def jit_kwargs(self, n_leaves: int, n_dynamic: int | None) -> dict:
        """kwargs for ``jax.jit(canonical, ...)``, whose first ``n_leaves``
        arguments are the lifted leaves."""
        out = {}
        for k, v in self.user.items():
            if k in ("static_argnums", "donate_argnums"):
                v = _shift(_index_tuple(k, v), n_leaves)
            elif k == "in_shardings":
                if v is _UNSPECIFIED or v is None:
                    continue
                user = tuple(v) if isinstance(v, (tuple, list)) else (v,) * n_dynamic
                v = (None,) * n_leaves + user
            elif v is _UNSPECIFIED:
                continue
            out[k] = v
        return out


_DEFAULT_OPTIONS = _Options({})
_UNKEYABLE_LOGGED: set = set()  # the tags of functions said to be unkeyable
_OPTIONS_MEMO: dict = {}


def _options(kwargs: dict) -> _Options:
    if not kwargs:
        return _DEFAULT_OPTIONS
    try:
        memo_key = tuple(sorted(kwargs.items()))
        opts = _OPTIONS_MEMO.get(memo_key)
    except TypeError:  # unhashable option values (a dict of shardings)
        return _Options(kwargs)
    if opts is None:
        opts = _OPTIONS_MEMO[memo_key] = _Options(kwargs)
    return opts


def _check_callable(fun) -> None:
    if not callable(fun):
        raise TypeError(f"stable_jit expects a callable, got {type(fun).__name__}: {fun!r}")
    target = fun.__func__ if isinstance(fun, types.MethodType) else fun
    code = getattr(target, "__code__", None)
    if isinstance(code, types.CodeType) and code_info(code).is_generator:
        raise TypeError(
            f"stable_jit cannot compile {getattr(fun, '__qualname__', fun)!r}: it is a "
            "generator or coroutine function, whose calls return an iterator rather than "
            "arrays."
        )


def _signature(fn, n_leaves: int):
    """``fn``'s signature behind ``n_leaves`` positional-only leaf parameters
    (JAX resolves ``static_argnames`` through it)."""
    try:
        sig = inspect.signature(fn)
    except Exception:  # noqa: BLE001 - inspect runs user __eq__ on callable objects
        return None
    kind = inspect.Parameter.POSITIONAL_ONLY
    leaves = [inspect.Parameter(_bake.LEAF_NAME.format(i), kind) for i in range(n_leaves)]
    try:
        return sig.replace(parameters=[*leaves, *sig.parameters.values()])
    except ValueError:
        return None


def _tag(fn):
    """What identifies "this function" across redefinitions (for clear_cache,
    counters and the recompile limit): its code, or for a partial (a loop's
    bound functions) the code of it and of the functions it binds."""
    fn = user_function(fn)  # jax.grad(loss) is loss's, not jax's wrapper's
    if isinstance(fn, functools.partial):
        return (_tag(fn.func), *(_tag(a) for a in callables_in(fn.args)))
    code = getattr(fn, "__code__", None)
    return code_info(code).digest if isinstance(code, types.CodeType) else type(fn)


class Unkeyable(Exception):
    """What a callable reaches cannot be walked: nested deeper than Python's
    recursion limit allows (a structure that grows with every call)."""


def _walk(make_walker, subject) -> tuple[Any, list]:
    """The key and leaves of ``subject``, by a fresh walker of ``make_walker``.

    A dict or set that changes while it is walked (another thread, or a
    pytree whose flattening sets up state lazily) gets one more walk, over
    the settled state.
    """
    for attempt in (0, 1):
        w = make_walker()
        try:
            return w.walk(subject), w.leaves
        except RuntimeError as e:
            if isinstance(e, RecursionError):
                raise Unkeyable(str(e)) from e
            if attempt or "changed" not in str(e) or "during iteration" not in str(e):
                raise
    raise AssertionError("unreachable")


class StableJitted:
    """A callable compiled like ``jax.jit``, cached by structure.

    Returned by :func:`stable_jit`; see there.

    Example:
        >>> import jax.numpy as jnp
        >>> from stablejit import stable_jit
        >>> f = stable_jit(lambda x: x * 2)
        >>> f.lower(jnp.ones(2)).compile()(jnp.ones(2))
        Array([2., 2.], dtype=float32)
    """

    __slots__ = ("_fun", "_opts", "__weakref__")

    def __init__(self, fun: Callable, opts: _Options):
        self._fun = fun
        self._opts = opts

    # -- functools.wraps without the per-construction cost
    @property
    def __wrapped__(self):
        return self._fun

    def __getattr__(self, name):
        # functools.wraps without its per-construction cost.
        if name in ("__name__", "__qualname__"):
            return getattr(self._fun, name, type(self._fun).__name__)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __repr__(self):
        fn = self._fun
        info = self.cache_info()
        return (
            f"<stable_jit of {display_name(fn)}{location(fn)}: {info.entries} compiled, "
            f"{info.hits} hits, {info.misses} misses, {info.traces} traces>"
        )

    def __get__(self, obj, objtype=None):
        # Decorating a method: bind like a function would, then jit the bound
        # method (keyed by the structure of ``obj``).
        if obj is None:
            return self
        return _wrap(types.MethodType(self._fun, obj), self._opts)

    def _prepare(self, args, kwargs):
        """``(subject, args, kwargs)``: what the call is keyed on, and the
        arguments as the canonical jit takes them (see _statics)."""
        return self._fun, args, kwargs

    def _key(self, args, subject=None, static_scalars=False):
        opts = self._opts
        subject = self._fun if subject is None else subject
        head = opts.key
        if opts.lift is None or static_scalars:
            if static_scalars:
                head = opts.static_key
            fkey, leaves = _walk(KeyWalker, subject)
        else:
            fkey, leaves = _walk(functools.partial(walker, opts.lift), subject)
            if (head, fkey) in _cache.STATIC_SCALARS:
                # This variant failed to trace with its scalars lifted.
                head = opts.static_key
                fkey, leaves = _walk(KeyWalker, subject)
        baked, leaves = _bake.split((head, fkey), leaves)
        key = (head, len(args), fkey) if opts.broadcast_in_shardings else (head, fkey)
        if baked is not None:
            key = (*key[:-1], baked, fkey)
        return key, leaves

    def _lift_of(self, key) -> Lift:
        """How the leaves of ``key`` were collected."""
        return self._opts.lift if key[0] is self._opts.key else None

    @staticmethod
    def _baked_of(key) -> _bake.Baked | None:
        """Which leaves of ``key`` are baked in (see _bake)."""
        return key[-2] if len(key) > 2 and type(key[-2]) is _bake.Baked else None

    @_cache.entry_point
    def __call__(self, *args, **kwargs):
        fn = self._fun
        opts = self._opts
        if type(fn) is _FunctionType:
            # A redefined closure whose children are all immutable values or
            # arrays: re-check them by identity and go straight to its entry
            # (see _fastpath); the full walk below is the general case.
            info = _CODE_INFO.get(id(fn.__code__))
            fast = info and info.fast[0]
            if fast is not None:
                entry = fast.entries.get(opts)
                if entry is not None:
                    ready = entry.ready
                    leaves = []
                    if ready is not None and fast.match(fn, leaves, _sinks.SINKS) is not None:
                        entry.hits += 1
                        if leaves:
                            return ready(*leaves, *args, **kwargs)
                        return ready(*args, **kwargs)
        try:
            key, leaves = self._key(args)
        except Unkeyable as e:
            return self._unkeyable(e, "__call__", args, kwargs)
        entry = CACHE.get(key)
        if entry is not None:
            ready = entry.ready
            if ready is not None:
                entry.hits += 1
                if type(fn) is _FunctionType and len(key) == 2:
                    # (Not for baked variants: a record re-checks arrays by type.)
                    fast = _CODE_INFO[id(fn.__code__)].fast[0]
                    if fast is not None and fast.key is key[-1]:  # the walk just built it
                        fast.entries[opts] = entry
                return ready(*leaves, *args, **kwargs)
        return self._first_call(args, kwargs)

    def _entry(self, key, leaves, args, subject):
        fn = self._fun

        def build(entry):
            n_dynamic = None
            if self._opts.broadcast_in_shardings:
                n = len(args)
                n_dynamic = n - sum(1 for i in self._opts.static_argnums if -n <= i < n)
            name = getattr(fn, "__name__", type(fn).__name__)
            n_leaves = len(leaves)
            canonical = _cache.make_canonical(
                entry,
                n_leaves,
                name,
                getattr(fn, "__qualname__", name),
                _signature(fn, n_leaves),
                self._lift_of(key),
                baked.positions if (baked := self._baked_of(key)) is not None else frozenset(),
                adaptive=not any(k in self._opts.user for k in _PLACED_OPTIONS),
            )
            return JIT(canonical, **self._opts.jit_kwargs(n_leaves, n_dynamic))

        entry = _cache.lookup(key)
        if entry is not None:
            return entry
        tag = self._tag()
        stats = _stats.stats_for(tag, display_name(fn), location(fn))
        if not _explain.on_new_key(stats, subject, key):
            return None
        entry = _cache.get_or_create(key, tag, build)
        entry.stats = stats
        entry.leaf_labels = [name for name, _ in stats.descriptions[-1].lifted]
        return entry

    def _tag(self):
        return (self._opts.key, _tag(self._fun))

    def _uncached(self):
        """A plain ``jax.jit``, for variants past the recompile limit (stance
        "fallback") and callables that cannot be keyed."""
        return JIT(self._fun, **self._opts.user)

    def _unkeyable(self, error: Unkeyable, method: str, args, kwargs):
        """Runs a call whose callable cannot be keyed as plain ``jax.jit``
        would: traced anew, never wrong. Logged once per function."""
        tag = self._tag()
        if tag not in _UNKEYABLE_LOGGED:
            _UNKEYABLE_LOGGED.add(tag)
            _explain.logger.warning(
                "stable_jit(%s)%s cannot be keyed (%s): its calls run through a plain "
                "jax.jit, traced anew each time",
                display_name(self._fun),
                location(self._fun),
                error,
            )
        return getattr(self._uncached(), method)(*args, **kwargs)

    @_cache.entry_point
    def _first_call(self, args, kwargs, static_scalars=False):
        with _cache.TRACE_LOCK:
            # The hot path's key may have been read while another thread's
            # trace was mutating state (see TRACE_LOCK): read it with none running.
            subject, cargs, ckwargs = self._prepare(args, kwargs)
            try:
                key, leaves = self._key(cargs, subject, static_scalars)
            except Unkeyable as e:
                release(cargs, ckwargs)
                return self._unkeyable(e, "__call__", args, kwargs)
            entry = self._entry(key, leaves, cargs, subject)
            if entry is None:
                return self._uncached()(*args, **kwargs)
            jitted = entry.jitted
            disk = None
            if entry.ready is None and config.persistent_dir is not None:
                jax_hits = _persist.jax_cache_hits()
                disk = self._disk_key(key, leaves, cargs, ckwargs)
                compiled = disk and _persist.load(disk)
                if compiled:
                    ready = entry.ready = _persist.loaded_ready(compiled, jitted, entry, disk)
                    return ready(*leaves, *cargs, **ckwargs)
            if entry.ready is None:
                # Trace under the lock, so racing first calls trace once; JAX
                # caches the trace, and the call below compiles outside the lock.
                try:
                    jitted.trace(*leaves, *cargs, **ckwargs)
                except Exception as e:
                    if self._scalars_fall_back(key, entry, leaves, cargs, subject):
                        static_scalars = True
                    elif not self._arrays_fall_back(e, key, entry, leaves, cargs, subject):
                        raise
                    jitted = None
            if jitted is None:
                return self._first_call(args, kwargs, static_scalars)
        try:
            out = jitted(*leaves, *cargs, **ckwargs)
            if disk:
                # JAX kept the trace, lowering and executable: this costs
                # the serialization only.
                compiled = jitted.lower(*leaves, *cargs, **ckwargs).compile()
                _persist.save(disk, compiled, jax_hits)
        finally:
            _stats.done_compiling()
            release(cargs, ckwargs)
        if entry.jitted is jitted:  # not evicted meanwhile
            entry.ready = jitted
        return out

    def _disk_key(self, key, leaves, args, kwargs) -> bytes | None:
        if self._opts.statics is not None:
            return None  # the executable would not take the static arguments
        return _persist.disk_key(key, leaves, args, kwargs)

    @_cache.entry_point
    def _stage(self, method: str, args, kwargs, static_scalars=False):
        with _cache.TRACE_LOCK:
            subject, cargs, ckwargs = self._prepare(args, kwargs)
            try:
                key, leaves = self._key(cargs, subject, static_scalars)
            except Unkeyable as e:
                return self._unkeyable(e, method, args, kwargs), []
            entry = self._entry(key, leaves, cargs, subject)
            if entry is None:
                return getattr(self._uncached(), method)(*args, **kwargs), []
            try:
                return getattr(entry.jitted, method)(*leaves, *cargs, **ckwargs), leaves
            except Exception as e:
                if self._scalars_fall_back(key, entry, leaves, cargs, subject):
                    static_scalars = True
                elif not self._arrays_fall_back(e, key, entry, leaves, cargs, subject):
                    raise
            finally:
                _stats.done_compiling()
            return self._stage(method, args, kwargs, static_scalars)

    def _scalars_fall_back(self, key, entry, leaves, args, subject) -> bool:
        """After a failed trace: if it lifted Python numbers (``lift_scalars``),
        keys this variant with static numbers from now on and says so
        (True). A lifted number used where a concrete value is needed (a
        shape, a Python ``if``) fails only this way, so the retry is right."""
        if self._lift_of(key) is None or not any(type(x) in _NUMBERS for x in leaves):
            return False
        _cache.keep_scalars_static(self._variants(key, args, subject), entry)
        return True

    def _variants(self, key, args, subject) -> set:
        """``(options, function key)`` of the variant that failed to trace as
        ``key``, and of the one it is keyed as now: what the failed trace
        wrote is a side channel from now on, so the key may have changed."""
        after = self._key(args, subject)[0]
        return {(key[0], key[-1]), (after[0], after[-1])}

    def _arrays_fall_back(self, error, key, entry, leaves, args, subject) -> bool:
        """After a failed trace: if lifted arrays were needed as concrete
        values, bakes them into this variant from now on (keyed by their
        contents, see _bake), says so, and returns True."""
        if not isinstance(error, _bake.CONCRETE_ERRORS):
            return False
        variants = self._variants(key, args, subject)
        baked = _bake.fall_back(error, variants, self._baked_of(key), leaves)
        if not baked:
            return False
        labels = entry.leaf_labels
        names = ", ".join(labels[i] if i < len(labels) else f"lifted array {i}" for i in baked)
        _explain.logger.info(
            "stable_jit(%s)%s needs %s as a concrete value: keyed by its contents and baked "
            "in, as jax.jit does, instead of lifted",
            display_name(self._fun),
            location(self._fun),
            names,
        )
        _cache.drop(entry)
        return True

    def trace(self, *args, **kwargs) -> Staged:
        """Traces like ``jax.jit(f).trace``; the result's ``lower()`` and its
        ``compile()`` keep the lifted arrays, so the compiled function takes the
        user's arguments only."""
        traced, leaves = self._stage("trace", args, kwargs)
        return Staged(traced, leaves)

    def lower(self, *args, **kwargs) -> Staged:
        """Lowers like ``jax.jit(f).lower``; see :meth:`trace`."""
        lowered, leaves = self._stage("lower", args, kwargs)
        return Staged(lowered, leaves)

    def eval_shape(self, *args, **kwargs):
        """Output shapes and dtypes, like ``jax.jit(f).eval_shape``."""
        return self._stage("eval_shape", args, kwargs)[0]

    def clear_cache(self) -> None:
        """Drops the compiled entries of this function (all redefinitions of
        it), and its counters."""
        _cache.clear(self._tag())

    def cache_info(self) -> CacheInfo:
        """The counters of this function, all its redefinitions together."""
        return _stats.cache_info(self._tag())


class Staged:
    """A ``jax.stages`` object (Traced, Lowered, Compiled) with the lifted leaves
    bound as the first argument, so it takes the user's arguments only."""

    __slots__ = ("_stage", "_leaves")

    def __init__(self, stage, leaves):
        self._stage = stage
        self._leaves = leaves

    def lower(self, *args, **kwargs) -> Staged:
        return Staged(self._stage.lower(*args, **kwargs), self._leaves)

    def compile(self, *args, **kwargs) -> Staged:
        return Staged(self._stage.compile(*args, **kwargs), self._leaves)

    def __call__(self, *args, **kwargs):
        return self._stage(*self._leaves, *args, **kwargs)

    @property
    def args_info(self):
        args, kwargs = self._stage.args_info
        return args[len(self._leaves) :], kwargs

    def __getattr__(self, name):
        return getattr(self._stage, name)

    def __repr__(self):
        return f"<stablejit {type(self._stage).__name__}: {self._stage!r}>"


def stable_jit(
    fun: Callable | None = None,
    /,
    *,
    in_shardings: Any = _UNSPECIFIED,
    out_shardings: Any = _UNSPECIFIED,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Iterable[str] | None = None,
    keep_unused: bool = False,
    device: Any = None,
    backend: str | None = None,
    inline: bool = False,
    compiler_options: dict[str, Any] | None = None,
    lift_scalars: bool | Iterable[str] = False,
) -> Any:
    """``jax.jit`` whose cache survives redefinition of the function.

    ``jax.jit`` caches per function *object*, so a nested function, lambda or
    closure built anew on each call recompiles on each call. ``stable_jit``
    keys its cache on what the function *is*: its code, defaults, the globals
    it reads and the contents of its closure (recursively through nested
    functions, ``functools.partial``, bound methods and objects). Equal
    structure and equal static values share one compiled executable however
    often the function is redefined; anything that can change the trace —
    rebinding a global or closed-over variable, mutating a closed-over list,
    dict or object — is seen and retraced, where ``jax.jit`` would return a
    stale result.

    Differences from ``jax.jit``, on purpose:

    * Arrays reachable from the function (closed over, in defaults, globals,
      bound objects) are *lifted*: passed to the compiled computation as
      inputs, keyed by shape/dtype/sharding, never by value. New values never
      recompile and are never baked into the executable as constants. Such an
      array is a tracer inside the function; where the code needs it as a
      concrete value (``int(a)``, a shape, a Python ``if``), that variant is
      traced again with the array baked in, as ``jax.jit`` does, and keyed by
      its contents, so a new value retraces rather than going stale.
    * Python scalars, strings and other non-array values reachable from the
      function are static: a new value compiles a new variant (unless
      ``lift_scalars`` says otherwise).
    * Static arguments (``static_argnums``/``static_argnames``) are keyed by
      structure like closure contents, not by ``__hash__``/``__eq__``: a fresh
      but equal callable (``optax.adam(1e-3)``) hits, arrays inside one are
      lifted, an object mutated in place retraces, and unhashable values
      (lists) are accepted. Objects of a class written to be a key (its body
      defines both ``__eq__`` and ``__hash__``) are keyed by that equality,
      as ``jax.jit`` keys them.

    Arguments:
        fun: the function (or any callable) to compile. As in ``jax.jit``, it
            may be omitted to use ``stable_jit(...)`` as a decorator factory.
        in_shardings: as for ``jax.jit``, for the user's arguments.
        out_shardings: as for ``jax.jit``.
        static_argnums: as for ``jax.jit``, but keyed by structure (see above).
        static_argnames: as for ``jax.jit``, but keyed by structure (see above).
        donate_argnums: as for ``jax.jit`` (lifted arrays are never donated).
        donate_argnames: as for ``jax.jit`` (lifted arrays are never donated).
        keep_unused: as for ``jax.jit``.
        device: as for ``jax.jit``.
        backend: as for ``jax.jit``.
        inline: as for ``jax.jit``.
        compiler_options: as for ``jax.jit``.
        lift_scalars: stablejit's own option. ``True`` lifts every Python
            ``float`` and ``complex`` the function reaches (a learning rate, a
            temperature) to a weakly typed input, like an array, so a new value
            does not recompile; a sequence of names lifts the numbers (``int``
            too) held directly by closure variables or globals of those names.
            If the function then uses such a number where a concrete value is
            needed (a shape, ``range``, a Python ``if``), the trace fails and
            that variant is retraced with its numbers static, automatically.
            Lifted numbers are tracers: code that formats or type-checks them
            sees a tracer.

    Returns:
        A :class:`StableJitted` callable with ``jax.jit``'s ``lower``,
        ``trace``, ``eval_shape`` and ``clear_cache`` (or, without ``fun``,
        a decorator that makes one).

    Example:
        >>> import jax.numpy as jnp
        >>> from stablejit import stable_jit
        >>> def outer(a):
        ...     def inner(x):
        ...         return x * 2
        ...     return stable_jit(inner)(a)   # compiles once, not per call
        >>> outer(jnp.ones(3))
        Array([2., 2., 2.], dtype=float32)
    """
    if (
        fun is not None
        and in_shardings is _UNSPECIFIED
        and out_shardings is _UNSPECIFIED
        and static_argnums is None
        and static_argnames is None
        and donate_argnums is None
        and donate_argnames is None
        and keep_unused is False
        and device is None
        and backend is None
        and inline is False
        and compiler_options is None
        and lift_scalars is False
    ):
        # The common call, made on every call of a function that defines its
        # jitted function inside: kept cheap.
        if type(fun) is not types.FunctionType or fun.__code__.co_flags & _GENERATOR_FLAGS:
            _check_callable(fun)
        return StableJitted(fun, _DEFAULT_OPTIONS)
    kwargs = {
        k: v
        for k, v in (
            ("in_shardings", in_shardings),
            ("out_shardings", out_shardings),
            ("static_argnums", static_argnums),
            ("static_argnames", static_argnames),
            ("donate_argnums", donate_argnums),
            ("donate_argnames", donate_argnames),
            ("keep_unused", keep_unused),
            ("device", device),
            ("backend", backend),
            ("inline", inline),
            ("compiler_options", compiler_options),
            ("lift_scalars", lift_scalars),
        )
        if v is not _JIT_DEFAULTS.get(k, False)
    }
    opts = _options(kwargs)
    if fun is None:
        return functools.partial(_wrap, opts=opts)
    return _wrap(fun, opts)


def _wrap(fun, opts):
    _check_callable(fun)
    return (StableJitted if opts.statics is None else _StableJittedStatics)(fun, opts)


class _StableJittedStatics(StableJitted):
    """A :class:`StableJitted` with static arguments, which join the key (see
    _statics): no per-code fast path, as the arguments change per call."""

    __slots__ = ()

    def _prepare(self, args, kwargs):
        return self._opts.statics.box(self._fun, args, kwargs)

    @_cache.entry_point
    def __call__(self, *args, **kwargs):
        subject, cargs, ckwargs = self._opts.statics.box(self._fun, args, kwargs)
        try:
            key, leaves = self._key(cargs, subject)
        except Unkeyable as e:
            release(cargs, ckwargs)
            return self._unkeyable(e, "__call__", args, kwargs)
        entry = CACHE.get(key)
        if entry is not None:
            ready = entry.ready
            if ready is not None:
                entry.hits += 1
                try:
                    return ready(*leaves, *cargs, **ckwargs)
                finally:
                    release(cargs, ckwargs)
        return self._first_call(args, kwargs)


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
        return type(f)(r.walk(f._fun), f._opts)


register_kind(StableJitted, _StableKind())
register_kind(_StableJittedStatics, _StableKind())
