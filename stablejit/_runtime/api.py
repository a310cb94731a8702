"""``stable_jit``: the public entry point, typed like ``jax.jit``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

from .._fingerprint.code import INFO as CODE_INFO
from .._fingerprint.code import CodeInfo, FastRecords
from .._native import NATIVE
from .._registry import on_clear
from .jitted import StableJitted, check_callable, fast_call, jitted_of, made, wrap
from .options import DEFAULT_OPTIONS, options_of, signature

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .options import JitOptions

P = ParamSpec("P")
R = TypeVar("R")


def _made_fast(fun) -> StableJitted | None:
    """``made(fun, DEFAULT_OPTIONS)`` if ``fun`` is a function whose code has a
    call function (the common case of ``stable_jit(fun)``, on every call of
    a function that defines its jitted function inside), else None."""
    call = fast_call(fun)
    return None if call is None else jitted_of(call, fun, DEFAULT_OPTIONS)


F = TypeVar("F", bound=Callable)


def _front(impl: F) -> F:
    """``impl`` (stable_jit) with its common call, ``stable_jit(fun)`` of a
    function whose code has a call function, made in C where the
    accelerator is built (its ``Front``, which wears ``impl``'s name,
    docstring and signature); ``impl`` itself otherwise."""
    if NATIVE is None:
        return impl
    front = NATIVE.Front(
        impl=impl,
        info=CODE_INFO,
        info_type=CodeInfo,
        fast_index=CodeInfo._fields.index("fast"),
        records_type=FastRecords,
        cls=StableJitted,
        opts=DEFAULT_OPTIONS,
    )
    functools.update_wrapper(front, impl)
    # It *is* stable_jit, not a wrapper of it: inspect.unwrap(jax.jit) under
    # patch() must land here (its signature is its own __signature__).
    del front.__wrapped__
    # It remembers the last code's records, which clear_cache replaces.
    on_clear(front.forget)
    return front


@overload
def stable_jit(fun: Callable[P, R], /, **options: Unpack[JitOptions]) -> StableJitted[P, R]: ...


@overload
def stable_jit(
    fun: None = None, /, **options: Unpack[JitOptions]
) -> Callable[[Callable[P, R]], StableJitted[P, R]]: ...


@_front
def stable_jit(fun: Callable | None = None, /, **options: Any) -> Any:
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
      recompile and are never baked into the executable as constants. (Small
      NumPy arrays, up to ``config.numpy_constant_bytes``, are constants as
      under ``jax.jit``, concrete inside the trace, and keyed by their
      contents, read on every call: written in place, they retrace.) Such an
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
        **options: ``jax.jit``'s keyword arguments (``in_shardings``,
            ``static_argnums``, ``donate_argnums``, …), with the same meaning
            except as said above, and stablejit's own ``lift_scalars``: see
            :class:`JitOptions`.

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
    if not options and fun is not None:
        # The common call, made on every call of a function that defines its
        # jitted function inside: kept cheap. (A code whose record has a call
        # function was called: not a generator.)
        self = _made_fast(fun)
        if self is not None:
            return self
        check_callable(fun)
        return made(fun, DEFAULT_OPTIONS)
    opts = options_of(options)
    if fun is None:
        return functools.partial(wrap, opts=opts)
    return wrap(fun, opts)


stable_jit.__signature__ = signature()  # type: ignore[attr-defined]
