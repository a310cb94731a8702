"""``jax.stages`` objects of a ``stable_jit`` function, its lifted arrays bound.

An entry's ``jax.jit`` takes the lifted leaves first (see :mod:`.canonical`),
so its ``Traced``, ``Lowered`` and ``Compiled`` do too. What ``stable_jit``'s
``trace`` and ``lower`` return are those same objects, as subclasses of
``jax.stages.Traced``, ``Lowered`` and ``Compiled`` (code that checks them
with ``isinstance``, equinox's typed AOT path, accepts them), that take and
describe the user's arguments only: the leaves are bound when they are
called, and left out of ``args_info``, ``in_avals`` and ``in_tree``.
Everything else is JAX's own, read from the stage they were made from.
"""

from __future__ import annotations

from jax import stages


def _users(tree, n: int):
    """``(args, kwargs)`` of the entry's jit, without its first ``n`` (leaves)."""
    args, kwargs = tree
    return tuple(args[n:]), kwargs


def bound(stage, leaves):
    """``stage`` (a ``jax.stages`` object) with ``leaves`` bound: an object of
    its subclass here, holding JAX's state as ``stage`` does."""
    cls = _BOUND[type(stage)] if type(stage) in _BOUND else _subclass_of(stage)
    self = object.__new__(cls)
    for c in type(stage).__mro__:  # JAX's slots, whatever this JAX's version has
        slots = c.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            descriptor = c.__dict__[name]
            try:
                descriptor.__set__(self, descriptor.__get__(stage, c))
            except AttributeError:  # not set on ``stage``
                pass
    self.__dict__.update(getattr(stage, "__dict__", {}))
    self._full = stage
    self._leaves = tuple(leaves)
    return self


def _subclass_of(stage):
    for base, cls in _BOUND.items():
        if isinstance(stage, base):
            return cls
    raise TypeError(f"not a jax.stages Traced, Lowered or Compiled: {type(stage).__name__}")


class _Bound:
    """What the three stages share: the user's arguments only."""

    __slots__ = ()

    @property
    def args_info(self):
        return _users(self._full.args_info, len(self._leaves))

    @property
    def in_avals(self):
        return _users(self._full.in_avals, len(self._leaves))


class Traced(_Bound, stages.Traced):
    """``jax.stages.Traced`` of a ``stable_jit`` function (see the module)."""

    def __call__(self, *args, **kwargs):
        return self._full(*self._leaves, *args, **kwargs)

    def lower(self, *args, **kwargs) -> Lowered:
        return bound(self._full.lower(*args, **kwargs), self._leaves)


class Lowered(_Bound, stages.Lowered):
    """``jax.stages.Lowered`` of a ``stable_jit`` function (see the module):
    its ``compile()`` takes the user's arguments only."""

    def compile(self, *args, **kwargs) -> Compiled:
        return bound(self._full.compile(*args, **kwargs), self._leaves)


class Compiled(_Bound, stages.Compiled):
    """``jax.stages.Compiled`` of a ``stable_jit`` function (see the module):
    called with the user's arguments, it passes the lifted arrays first."""

    def __call__(self, *args, **kwargs):
        return self._full(*self._leaves, *args, **kwargs)

    @property
    def input_shardings(self):
        return _users(self._full.input_shardings, len(self._leaves))

    @property
    def input_formats(self):
        return _users(self._full.input_formats, len(self._leaves))


_BOUND = {stages.Traced: Traced, stages.Lowered: Lowered, stages.Compiled: Compiled}
