"""``jax.jit``'s options, as ``stable_jit`` takes them: validated once, keyed, passed on.

The option list is written here once: :class:`JitOptions` types it and
:data:`DEFAULTS` gives ``jax.jit``'s defaults (plus ``lift_scalars``).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any, TypedDict

import jax

from .._markers import sentinel
from .._registry import Memo
from .statics import StaticSlots

UNSPECIFIED = sentinel("unspecified")
"""``in_shardings``/``out_shardings`` not given (``jax.jit``'s own default)."""


class JitOptions(TypedDict, total=False):
    """The keyword arguments of :func:`stablejit.stable_jit`: ``jax.jit``'s,
    and ``lift_scalars``.

    Attributes:
        in_shardings: as for ``jax.jit``, for the user's arguments.
        out_shardings: as for ``jax.jit``.
        static_argnums: as for ``jax.jit``, but keyed by structure (see :func:`stablejit.stable_jit`).
        static_argnames: as for ``jax.jit``, but keyed by structure (see :func:`stablejit.stable_jit`).
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
    """

    in_shardings: Any
    out_shardings: Any
    static_argnums: int | Sequence[int] | None
    static_argnames: str | Iterable[str] | None
    donate_argnums: int | Sequence[int] | None
    donate_argnames: str | Iterable[str] | None
    keep_unused: bool
    device: Any
    backend: str | None
    inline: bool
    compiler_options: dict[str, Any] | None
    lift_scalars: bool | Iterable[str]


DEFAULTS: dict[str, Any] = {
    "in_shardings": UNSPECIFIED,
    "out_shardings": UNSPECIFIED,
    "static_argnums": None,
    "static_argnames": None,
    "donate_argnums": None,
    "donate_argnames": None,
    "keep_unused": False,
    "device": None,
    "backend": None,
    "inline": False,
    "compiler_options": None,
    "lift_scalars": False,
}
"""Each option's default: ``jax.jit``'s, and ``lift_scalars=False``."""

PLACED_OPTIONS = ("in_shardings", "donate_argnums", "donate_argnames")
"""Options that place or donate arguments by their pytree structure, which
passing them by structure (see :mod:`.argtrees`) would change."""

Lift = None | bool | frozenset
"""What ``lift_scalars`` asks for: None, True, or variable names."""


def signature(fun_annotation: Any = Any) -> inspect.Signature:
    """``stable_jit``'s signature, spelled out from :data:`DEFAULTS` (it is
    written ``stable_jit(fun=None, /, **options)``)."""
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("fun", inspect.Parameter.POSITIONAL_ONLY, default=None)]
    hints = JitOptions.__annotations__
    params += [
        inspect.Parameter(k, kw, default=v, annotation=hints[k]) for k, v in DEFAULTS.items()
    ]
    return inspect.Signature(params)


def index_tuple(name, value) -> tuple[int, ...]:
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


def name_tuple(name, value) -> tuple[str, ...]:
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


def lift_option(value) -> Lift:
    """``lift_scalars`` as the walk takes it."""
    if value is False or value is None:
        return None
    if value is True:
        return True
    if isinstance(value, bool) or not isinstance(value, (str, Iterable)):
        raise TypeError(
            f"lift_scalars must be a bool or a sequence of variable names, got {value!r}"
        )
    return frozenset(name_tuple("lift_scalars", value))


def _hashable(tree) -> Any:
    leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=lambda x: x is None)
    return (treedef, tuple(leaves))


def _shift(nums: tuple[int, ...], n: int) -> tuple[int, ...]:
    # The canonical function takes the n leaves first; negative indices count
    # from the end and are unaffected.
    return tuple(i + n if i >= 0 else i for i in nums)


def _key_part(k: str, v) -> Any:
    if k in ("in_shardings", "out_shardings"):
        return _hashable(v)
    if k == "compiler_options":
        return tuple(sorted(v.items())) if v is not None else None
    if k in ("device", "backend", "keep_unused", "inline"):
        return v
    # Sets, as jax.jit reads them: static_argnums=(1, 0) and (0, 1) are one program.
    return tuple(sorted(set(index_tuple(k, v) if k.endswith("argnums") else name_tuple(k, v))))


class Options:
    """``jax.jit`` options, validated once, with the kwargs for the canonical jit."""

    __slots__ = (
        "user",
        "key",
        "static_key",
        "broadcast_in_shardings",
        "static_argnums",
        "statics",
        "lift",
        "__weakref__",
    )

    def __init__(self, user: dict):
        unknown = set(user) - set(DEFAULTS)
        if unknown:
            raise TypeError(f"stable_jit() got unexpected keyword arguments {sorted(unknown)}")
        user = dict(user)
        self.lift = lift_option(user.pop("lift_scalars", False))
        self.user = user
        opts = {**DEFAULTS, **user}
        self.static_argnums = index_tuple("static_argnums", opts["static_argnums"])
        names = name_tuple("static_argnames", opts["static_argnames"])
        # As jax.jit: one of them given (not None) fills in the other.
        infer = opts["static_argnums"] is None or opts["static_argnames"] is None
        self.statics = (
            StaticSlots(self.static_argnums, names, infer) if names or self.static_argnums else None
        )
        index_tuple("donate_argnums", opts["donate_argnums"])
        name_tuple("donate_argnames", opts["donate_argnames"])
        ins = opts["in_shardings"]
        self.broadcast_in_shardings = not (
            ins is UNSPECIFIED or ins is None or isinstance(ins, (tuple, list))
        )
        co = opts["compiler_options"]
        if co is not None and not isinstance(co, dict):
            raise TypeError(f"compiler_options must be a dict, got {type(co).__name__}")
        self.key = tuple((k, _key_part(k, v)) for k, v in sorted(user.items()))
        # Keys of variants that fell back to static scalars differ from
        # lifted ones by this head.
        self.static_key = self.key
        if self.lift is not None:
            self.key += (("lift_scalars", self.lift),)

    def for_function(self, fn) -> Options:
        """These options with their static arguments resolved against
        ``fn``'s signature and both given, as ``jax.jit`` holds them: one set
        of static arguments, however it was named (``static_argnums=0`` or
        ``static_argnames="x"``), keys one program, as ``jax.jit``'s caches,
        keyed by the function, trace and compile it once."""
        statics = self.statics
        if statics is None or not statics.infer:
            return self
        nums, names = statics.resolved(fn)
        if not nums and not names:
            return self  # (JAX refused what named nothing when it was wrapped)
        memo_key = (self.key, nums, names)
        out = _RESOLVED.get(memo_key)
        if out is None:
            user = {**self.user, "static_argnums": nums, "static_argnames": tuple(sorted(names))}
            if self.lift is not None:
                user["lift_scalars"] = self.lift
            out = _RESOLVED.put(memo_key, Options(user))
        return out

    @property
    def placed(self) -> bool:
        """Whether an option places or donates arguments by their structure."""
        return any(k in self.user for k in PLACED_OPTIONS)

    def jit_kwargs(self, n_leaves: int, n_dynamic: int | None) -> dict:
        """kwargs for ``jax.jit(canonical, ...)``, whose first ``n_leaves``
        arguments are the lifted leaves."""
        out = {}
        for k, v in self.user.items():
            if k in ("static_argnums", "donate_argnums"):
                v = _shift(index_tuple(k, v), n_leaves)
            elif k == "in_shardings":
                if v is UNSPECIFIED or v is None:
                    continue
                user = tuple(v) if isinstance(v, (tuple, list)) else (v,) * n_dynamic
                v = (None,) * n_leaves + user
            elif v is UNSPECIFIED:
                continue
            out[k] = v
        return out


DEFAULT_OPTIONS = Options({})
_MEMO = Memo(256)  # given options → Options (a mesh in a sharding stays alive with it)
_RESOLVED = Memo(256)  # (options' key, static slots) → Options (see Options.for_function)


def options_of(given: dict) -> Options:
    """The :class:`Options` of ``stable_jit``'s keyword arguments; those equal
    to their defaults are as if not given."""
    kwargs = {k: v for k, v in given.items() if v is not DEFAULTS.get(k, UNSPECIFIED)}
    if not kwargs:
        return DEFAULT_OPTIONS
    try:
        memo_key = tuple(sorted(kwargs.items()))
        opts = _MEMO.get(memo_key)
    except TypeError:  # unhashable option values (a dict of shardings)
        return Options(kwargs)
    if opts is None:
        opts = _MEMO.put(memo_key, Options(kwargs))
    return opts
