"""Keys that compare by identity."""

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
