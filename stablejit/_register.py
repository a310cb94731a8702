"""``register_type``: how values of a user's type enter a fingerprint."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Literal

from ._fingerprint.classify import IDENTITY_REF, VALUE, register_user_kind
from ._fingerprint.containers import Pytree, is_pytree_node
from ._fingerprint.kind import Kind
from ._markers import IdRef


class _KeyFunction(Kind):
    """Values keyed by a user's key function; static, never rebuilt."""

    name = "keyed object"

    def __init__(self, cls: type, fn: Callable[[Any], Hashable]):
        self.cls = IdRef(cls)
        self.fn = fn

    def key(self, w, v):
        k = self.fn(v)
        try:
            hash(k)
        except TypeError:
            raise TypeError(
                f"the key function registered for {type(v).__qualname__} returned an "
                f"unhashable {type(k).__name__}: {k!r:.80}"
            ) from None
        return (self.cls, k)


class _DeclaredPytree(Pytree):
    def key(self, w, v):
        if not is_pytree_node(type(v), v):
            raise TypeError(
                f"{type(v).__qualname__} was registered with stablejit as a pytree, "
                "but jax.tree_util does not know it: register it there too"
            )
        return super().key(w, v)


_BY = {"identity": IDENTITY_REF, "value": VALUE, "pytree": _DeclaredPytree(), "state": None}


def register_type(
    cls: type, by: Literal["identity", "value", "pytree", "state"] | Callable[[Any], Hashable]
) -> None:
    """Declares how values of ``cls`` (and its subclasses) are fingerprinted.

    By default stablejit reads an object's state (``__dict__``, slots),
    lifting the arrays in it; that is always correct but can be slower or
    stricter than needed. Declare instead:

    * ``"identity"``: one object, one key. For long-lived handles (a
      tokenizer, a mesh helper) whose state never changes what is traced.
      Mutating such an object in place is not seen.
    * ``"value"``: by ``__hash__`` and ``__eq__``, for immutable value types.
    * ``"pytree"``: through ``jax.tree_util`` (the type must be registered
      there): children walked, arrays lifted, auxiliary data keyed.
    * ``"state"``: the default, restored.
    * a function ``obj -> hashable``: by what it returns. The object is then
      static: arrays it holds are baked into the compiled code as constants,
      so the key must change whenever they do.

    Arguments:
        cls: the type.
        by: one of the above.

    Returns:
        None.

    Example:
        >>> import jax.numpy as jnp
        >>> from stablejit import register_type, stable_jit
        >>> class Vocab:
        ...     def __init__(self, words):
        ...         self.words = tuple(words)
        ...         self.lookups = 0          # a counter: not what is traced
        >>> register_type(Vocab, lambda v: v.words)
        >>> vocab = Vocab(["a", "b"])
        >>> stable_jit(lambda x: x * len(vocab.words))(jnp.ones(2))
        Array([2., 2.], dtype=float32)
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_type expects a class, got {type(cls).__name__}: {cls!r}")
    if callable(by):
        kind: Kind | None = _KeyFunction(cls, by)
    elif isinstance(by, str) and by in _BY:
        kind = _BY[by]
        if by == "value" and cls.__hash__ is None:
            raise TypeError(f"register_type({cls.__qualname__}, 'value'): it is unhashable")
    else:
        raise ValueError(
            f"register_type: by must be 'identity', 'value', 'pytree', 'state' or a key "
            f"function, got {by!r}"
        )
    register_user_kind(cls, kind)
