"""Key atoms with identity semantics: :class:`IdRef` and :func:`sentinel`."""

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
