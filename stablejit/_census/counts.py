"""The census's tallies: what one process did, kept in one object under one lock.

Everything the census hooks into (``jax.jit``, ``jax.lax``'s loops,
``jax.monitoring``, stablejit's logger) writes here and nothing else; the report reads a copy
taken under the lock. Counting is kept apart from how it is hooked in and
how it is shown, so each can change without the others.
"""

from __future__ import annotations

import collections
import functools
import threading
import types
import weakref
from typing import Any

from .._diagnostics import events

# The jax.monitoring events counted, by kind.
EVENTS = {"traces": events.TRACE, "compiles": events.COMPILE}


class Code:
    """What reached ``jax.jit`` with one code object."""

    __slots__ = ("name", "qualname", "where", "jits", "functions", "_alive", "_ids")

    def __init__(self, name: str, qualname: str, where: str):
        self.name, self.qualname, self.where = name, qualname, where
        self.jits = 0
        self.functions = 0
        # Distinct objects, even when a dead closure's id is reused by the next.
        self._alive: weakref.WeakSet = weakref.WeakSet()
        self._ids: set[int] = set()  # for callables that take no weak reference

    def note(self, fun: Any) -> None:
        self.jits += 1
        try:
            if fun in self._alive:
                return
            self._alive.add(fun)
        except TypeError:
            if id(fun) in self._ids:
                return
            self._ids.add(id(fun))
        self.functions += 1


def code_of(fun: Any) -> tuple[Any, str, str, str]:
    """``(key, __name__, qualname, file:line)`` of what ``fun`` runs."""
    while isinstance(fun, functools.partial):
        fun = fun.func
    fun = getattr(fun, "__func__", fun)
    code = getattr(fun, "__code__", None)
    if not isinstance(code, types.CodeType):
        code = getattr(type(fun).__call__, "__code__", None) if callable(fun) else None
    if isinstance(code, types.CodeType):
        where = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"
        qualname = getattr(code, "co_qualname", None) or getattr(fun, "__qualname__", code.co_name)
        return code, code.co_name, qualname, where
    name = getattr(fun, "__name__", type(fun).__name__)
    return type(fun), name, getattr(fun, "__qualname__", name), "?"


class Census:
    def __init__(self) -> None:
        self.mode: str | None = None
        self.lock = threading.Lock()
        self.jit_objects = 0
        self.codes: dict[Any, Code] = {}
        self.events = EVENTS
        self.counts = dict.fromkeys(self.events, 0)
        self.seconds = dict.fromkeys(self.events, 0.0)
        self.by_name: dict[str, collections.Counter] = {
            k: collections.Counter() for k in self.events
        }
        self.retraces: dict[tuple[str, str], list] = {}  # (function, what) → [count, last change]
        self.retrace_count = 0
        self.show_retraces = False
        # Functions passed to jax.lax's loops at the top level, by code: an eager loop is no
        # jax.jit object, but a body redefined on every call traces and compiles it each time.
        self.loop_codes: dict[Any, Code] = {}
        self.loop_of: dict[Any, str] = {}  # code → the first loop it was passed to
        self.loop_calls = 0
        self.fallbacks: dict[tuple[str, str], int] = {}  # (function, reason) → messages
        self.show_info = True  # whether stablejit's INFO records were shown before the census

    def note_loop(self, loop: str, funs: list) -> None:
        """One eager call of ``jax.lax``'s ``loop``, given the functions ``funs``."""
        with self.lock:
            self.loop_calls += 1
        for fun in funs:
            key, name, qualname, where = code_of(fun)
            with self.lock:
                code = self.loop_codes.get(key)
                if code is None:
                    code = self.loop_codes[key] = Code(name, qualname, where)
                    self.loop_of[key] = loop
                code.note(fun)

    def on_fallback(self, function: str, reason: str) -> None:
        with self.lock:
            self.fallbacks[(function, reason)] = self.fallbacks.get((function, reason), 0) + 1

    def note(self, fun: Any) -> None:
        key, name, qualname, where = code_of(fun)
        with self.lock:
            self.jit_objects += 1
            code = self.codes.get(key)
            if code is None:
                code = self.codes[key] = Code(name, qualname, where)
            code.note(fun)

    def on_event(self, event: str, seconds: float, **kwargs: Any) -> None:
        for kind, name in self.events.items():
            if event == name:
                fun_name = str(kwargs.get("fun_name", ""))
                # Compiles are named "jit(inner)", traces "inner".
                if fun_name.startswith("jit(") and fun_name.endswith(")"):
                    fun_name = fun_name[4:-1]
                with self.lock:
                    self.counts[kind] += 1
                    self.seconds[kind] += seconds
                    self.by_name[kind][fun_name] += 1

    def on_retrace(self, function: str, changes: list[tuple[str, str]]) -> None:
        """One retrace of ``function``: what changed, each with its values (or "")."""
        with self.lock:
            self.retrace_count += 1
            for what, change in changes:
                slot = self.retraces.setdefault((function, what), [0, ""])
                slot[0] += 1
                slot[1] = change


CENSUS = Census()
"""The process's census: one, as ``jax.jit`` is one."""
