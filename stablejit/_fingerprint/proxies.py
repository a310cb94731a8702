"""``weakref.proxy`` objects, keyed by what they stand for.

A proxy has no state of its own to read (no ``__dict__``, no slots), so as a
plain object every proxy would have one key: a function reading another
object, or a changed one, through a proxy would be served the first one's
trace. A proxy is keyed by its referent's key instead.
"""

from __future__ import annotations

from .._markers import IdRef
from .kind import Kind

_DEAD = ("dead weak proxy",)


def referent(proxy):
    """The object a live ``weakref.proxy`` stands for (ReferenceError once
    dead): a proxy forwards every attribute read, ``__getattribute__`` too,
    whose bound method's ``__self__`` is the referent itself."""
    return proxy.__getattribute__.__self__


class Proxy(Kind):
    """``weakref.proxy`` objects, keyed by their referent's key.

    A proxy has no state of its own to read (no ``__dict__``, no slots): as a
    plain object every proxy had the same key, so a function reading
    ``p.scale`` through a proxy to another object, or after the object
    changed, was served the first one's trace. Keyed through the referent,
    its arrays are lifted as the referent's own would be.
    """

    name = "weak proxy"

    def key(self, w, v):
        try:
            target = referent(v)
        except ReferenceError:
            return (IdRef(type(v)), _DEAD)
        return (IdRef(type(v)), w.walk(target))

    def children(self, w, v):
        try:
            return [("referent", referent(v))]
        except ReferenceError:
            return []

    def rebuild(self, r, v, i):
        target = referent(v)
        new = r.walk(target)
        if new is target:  # at trace time the referent took its substitutes in place
            return v
        # A copy: a proxy to it would die with the rebuild's memo, so the
        # rebuilt referent stands in for the proxy (attribute reads, calls and
        # operators reach the same state either way).
        return new


PROXY = Proxy()
