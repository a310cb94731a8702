"""Key atoms: :class:`IdRef` and :func:`sentinel` (identity), and
:class:`ByOwnEquality` (a value compared as ``jax.jit`` compares static arguments)."""

from __future__ import annotations


class IdRef:
    """Compares and hashes by identity; holding it keeps the object alive."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return type(other) is IdRef and other.obj is self.obj

    def __repr__(self):
        return f"IdRef({self.obj!r})"


class Sentinel:
    """A unique marker, equal only to itself, printed as ``<name>``."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"<{self.name}>"


def sentinel(name: str) -> Sentinel:
    """A new unique marker (keys compare them by identity)."""
    return Sentinel(name)


class ByOwnEquality:
    """A value in a key, compared by its own ``__eq__`` (its type is compared
    before it), whose error is ``jax.jit``'s when it compares a static
    argument with a cached one: a ValueError saying so. Its hash is taken
    once, when the key is made."""

    __slots__ = ("value", "_hash")

    def __init__(self, value, h: int):
        self.value = value
        self._hash = h

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        if type(other) is not ByOwnEquality:
            return False
        a, b = self.value, other.value
        try:
            return a is b or bool(a == b)
        except Exception as e:
            raise ValueError(
                "static arguments should be comparable using __eq__. The following error "
                f"was raised when comparing two objects of types {type(a)} and {type(b)}. "
                f"The error was:\n{type(e).__name__}: {e}"
            ) from e
