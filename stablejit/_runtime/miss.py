"""What a call does when its key has no ready entry: create one, or fall back.

A new key is explained and counted (the diagnostics), then gets an entry whose
``jax.jit`` is built around its canonical function. When a first trace fails
because lifting was wrong for this variant (a lifted number or array needed
concretely), the variant is re-keyed — numbers static, arrays baked — and
retried; a callable that cannot be keyed runs through a plain ``jax.jit``.
Every fallback costs a trace and a log line, never an exception.
"""

from __future__ import annotations

import types

from .._diagnostics import explain, stats
from .._diagnostics.describe import display_name, location
from .._fingerprint import bake
from .._originals import JIT
from .._registry import Memo
from . import cache, persist
from .canonical import Source, make_canonical
from .keys import Unkeyable, baked_of, call_key, lift_of, signature, tag, variant_of
from .options import Options

_NUMBERS = (int, float, complex)
_UNKEYABLE_LOGGED = Memo(1024)  # tags of functions said to be unkeyable
_REFUSED = Memo(1024)
"""Code objects whose functions could not be keyed, with why: refused from then
on without a walk (one that fails costs as much as it walked)."""
_MISMATCH_LOGGED = Memo(1024)  # tags of functions said to have run as plain jax.jit
_MISMATCHED = Memo(1024)
"""Keys whose trace could not substitute their leaves (see :func:`mismatched`)."""


def function_tag(fun, opts: Options):
    # (Options resolved as a call resolves them: wrappers sharing entries share counts.)
    return (opts.for_function(fun).key, tag(fun))


def _on_traced(entry: cache.Entry, leaves: tuple, args: tuple, kwargs: dict) -> None:
    """After each trace of an entry: explanations and compile attribution."""
    s = entry.counts.stats
    if s is not None:
        explain.on_retrace(entry, s.name, s.location, explain.signature(leaves, args, kwargs))
    stats.traced(entry)


def entry_for(fun, opts: Options, key, leaves: list, args: tuple, subject) -> cache.Entry | None:
    """The entry of ``key``, created on a miss; None if the recompile limit
    says this variant is not to be cached (stance "fallback")."""
    entry = cache.lookup(key)
    if entry is not None:
        return entry
    if key in _MISMATCHED:
        return None
    ftag = function_tag(fun, opts)
    s = stats.stats_for(ftag, display_name(fun), location(fun))
    if not explain.on_new_key(s, subject, key):
        return None

    def build(entry: cache.Entry):
        n_dynamic = None
        if opts.broadcast_in_shardings:
            n = len(args)
            n_dynamic = n - sum(1 for i in opts.static_argnums if -n <= i < n)
        name = getattr(fun, "__name__", type(fun).__name__)
        n_leaves = len(leaves)
        baked = baked_of(key)
        canonical = make_canonical(
            entry,
            n_leaves,
            name,
            getattr(fun, "__qualname__", name),
            signature(fun, n_leaves),
            lift_of(opts, key),
            baked.positions if baked is not None else frozenset(),
            adaptive=not opts.placed,
            on_traced=_on_traced,
            source=Source(fun),
        )
        return JIT(canonical, **opts.jit_kwargs(n_leaves, n_dynamic))

    entry = cache.get_or_create(key, ftag, build)
    cache.set_owner(entry, fun)
    stats.attach(entry, s)
    return entry


def uncached(fun, opts: Options):
    """A plain ``jax.jit``, for variants past the recompile limit (stance
    "fallback") and callables that cannot be keyed."""
    return JIT(fun, **opts.user)


def unkeyable(fun, opts: Options, error: Unkeyable):
    """The plain ``jax.jit`` that runs a call whose callable cannot be keyed,
    as without stablejit: never wrong. Logged once per function; a function's
    code is refused from then on (see :func:`refusal`)."""
    if type(fun) is types.FunctionType:
        _REFUSED.put(fun.__code__, str(error))
    _warn_once(_UNKEYABLE_LOGGED, fun, opts, "cannot be keyed (%s): its calls", error)
    return uncached(fun, opts)


def refusal(fun) -> Unkeyable | None:
    """Why ``fun``'s code could not be keyed before, if it could not: its
    calls then skip the walk, which would fail again at the same cost."""
    why = _REFUSED.get(fun.__code__) if type(fun) is types.FunctionType else None
    return None if why is None else Unkeyable(why)  # (a new one: a raised one keeps its frames)


def mismatched(fun, opts: Options, error) -> None:
    """After a trace that could not put the lifted arrays back where the key
    walk found them (the fingerprint's ``RebuildMismatch``: what the
    function reaches changed between the walks, or a kind rebuilds other
    than it keys): the variant traced (``error.entry``, set by the canonical
    function) runs through a plain ``jax.jit`` from now on, as it would
    without stablejit. Logged once per function."""
    entry = getattr(error, "entry", None)
    if entry is not None:
        for key in list(entry.keys):
            _MISMATCHED.put(key, None)
        cache.drop(entry)
    what = "could not substitute its lifted arrays at trace time (%s): this variant's calls"
    _warn_once(_MISMATCH_LOGGED, fun, opts, what, error)


def _warn_once(logged: Memo, fun, opts: Options, what: str, error) -> None:
    ftag = function_tag(fun, opts)
    if ftag not in logged:
        logged.put(ftag, None)
        explain.logger.warning(
            f"stable_jit(%s)%s {what} run through a plain jax.jit, as without stablejit "
            "(traced once per function object)",
            display_name(fun),
            location(fun),
            error,
        )


def _variants(opts: Options, key, args, subject) -> set:
    """The variant that failed to trace as ``key``, and the one it is keyed as
    now: what the failed trace wrote is a side channel from now on, so the
    key may have changed."""
    after = call_key(opts, subject, len(args))[0]
    return {variant_of(key), variant_of(after)}


def fall_back(fun, opts: Options, error, key, entry, leaves, args, subject) -> bool | None:
    """After a failed trace: how to retry, with Python numbers static (True)
    or as re-keyed with arrays baked in (False); None if neither applies
    (the error is the user's)."""
    if _scalars_fall_back(opts, key, entry, leaves, args, subject):
        return True
    if _arrays_fall_back(fun, opts, error, key, entry, leaves, args, subject):
        return False
    return None


def _scalars_fall_back(opts, key, entry, leaves, args, subject) -> bool:
    """After a failed trace: if it lifted Python numbers (``lift_scalars``), keys this
    variant with static numbers from now on (True). A lifted number used
    where a concrete value is needed (a shape, a Python ``if``) fails only
    this way, so the retry is right."""
    if lift_of(opts, key) is None or not any(type(x) in _NUMBERS for x in leaves):
        return False
    cache.keep_scalars_static(_variants(opts, key, args, subject), entry)
    return True


def _arrays_fall_back(fun, opts, error, key, entry, leaves, args, subject) -> bool:
    """After a failed trace: if lifted arrays were needed as concrete values, bakes them into this
    variant from now on (keyed by their contents, see the fingerprint's
    ``bake``), says so, and returns True."""
    if not isinstance(error, bake.CONCRETE_ERRORS):
        return False
    variants = _variants(opts, key, args, subject)
    baked = bake.fall_back(error, variants, baked_of(key), leaves)
    if not baked:
        return False
    labels = entry.counts.leaf_labels
    names = ", ".join(labels[i] if i < len(labels) else f"lifted array {i}" for i in baked)
    explain.logger.info(
        "stable_jit(%s)%s needs %s as a concrete value: keyed by its contents and baked "
        "in, as jax.jit does, instead of lifted",
        display_name(fun),
        location(fun),
        names,
    )
    cache.drop(entry)
    return True


def disk_key(opts: Options, key, leaves, args, kwargs) -> bytes | None:
    """The persistent-cache key of a call, or None if it cannot be persisted."""
    if opts.statics is not None:
        return None  # the executable would not take the static arguments
    return persist.disk_key(key, leaves, args, kwargs)
