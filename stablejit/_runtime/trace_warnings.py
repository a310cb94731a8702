"""Trace-time warnings, recorded and replayed: what a cache hit owes to ``jax.jit``.

A warning issued while a function is traced (a library validating concrete
parameters, JAX's own dtype notices) is a Python side effect of the trace.
``jax.jit`` traces every new function object, so a program, or a test under
``pytest.warns``, sees that warning once per function object. A stablejit hit
traces nothing: without a replay the warning would be gone.

So each trace records the warnings it shows (as shown, after the filters) in
its entry, and the first call of the entry by another function object (or
with another object that ``jax.jit`` compares by identity: a fresh closure
in a static argument or in a pytree's auxiliary data) shows them again,
through the filters and the warning registry of the module that issued them: where the filters say "once per location", the replay is
silent, as the retrace's warning would be; where they say "always" or
"error", it shows or raises, as it would.

Recording wraps the warnings module's ``_showwarnmsg`` (the one function both
``warnings.warn`` and C code's warnings reach once the filters let one
through) while any trace runs, and files what it sees by thread, so a
warning of another thread is not taken for the trace's.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
import weakref

_LOCK = threading.Lock()
_LOCAL = threading.local()
_active = 0  # traces recording now; the hook is installed while > 0
_original = None


def _hook(msg) -> None:
    logs = getattr(_LOCAL, "logs", None)
    if logs:
        logs[-1].append(msg)
    replayed = getattr(_LOCAL, "replayed", None)
    if replayed is None or _identity(msg) not in replayed:
        _original(msg)


def _install() -> bool:
    global _active, _original
    with _LOCK:
        if _active == 0:
            current = getattr(warnings, "_showwarnmsg", None)
            if current is None:  # a Python without the hook point: record nothing
                return False
            _original = current
            warnings._showwarnmsg = _hook
        _active += 1
        return True


def _uninstall() -> None:
    global _active
    with _LOCK:
        _active -= 1
        if _active == 0 and warnings._showwarnmsg is _hook:
            warnings._showwarnmsg = _original


@contextlib.contextmanager
def recording():
    """Collects, into the list it yields, the warnings this thread shows
    inside the block (they are shown as usual too)."""
    log: list = []
    if not _install():
        yield log
        return
    logs = _LOCAL.__dict__.setdefault("logs", [])
    logs.append(log)
    try:
        yield log
    finally:
        logs.pop()
        _uninstall()


def merged(known: tuple, new: list) -> tuple:
    """``known`` with the warnings of ``new`` it lacks (a warning counts once
    per message, category and location)."""
    seen = {_identity(m) for m in known}
    out = list(known)
    for m in new:
        if _identity(m) not in seen:
            seen.add(_identity(m))
            out.append(m)
    return tuple(out)


class Warned:
    """What an entry's traces warned, and the callables that have called it
    since (an entry's ``warned``): written by this module alone."""

    __slots__ = ("warnings", "callers")

    def __init__(self):
        self.warnings: tuple = ()
        self.callers: weakref.WeakSet | None = None  # None until a trace warns


def saw(warned: Warned, callers: list, shown: list) -> bool:
    """After a trace by ``callers`` (the function, then what ``jax.jit``
    would have compared by identity in the call) that showed ``shown`` (or of
    an entry that had warned before): they have seen the warnings. True the
    first time its entry warned: from then on, its hits must replay them
    (:func:`replaying`)."""
    warned.warnings = merged(warned.warnings, shown)
    first = warned.callers is None
    if first:
        warned.callers = weakref.WeakSet()
    _new(warned.callers, callers)
    return first


@contextlib.contextmanager
def replaying(warned: Warned, callers: list):
    """Around a hit's call: shows ``warned``'s warnings again if one of
    ``callers`` has not seen them (``jax.jit`` would have traced that call
    anew), before the call runs, as a trace would. Should the call trace
    after all (new shapes, or JAX's own key), its trace does not show them a
    second time: one call, one showing, as under ``jax.jit``."""
    if not _new(warned.callers, callers):
        yield
        return
    emit(warned.warnings)
    outer = getattr(_LOCAL, "replayed", None)
    _LOCAL.replayed = (outer or frozenset()) | {_identity(m) for m in warned.warnings}
    try:
        yield
    finally:
        _LOCAL.replayed = outer


def _new(seen: weakref.WeakSet, callers: list) -> bool:
    new = False
    for c in callers:  # each noted, even after a new one
        new = first_call(seen, c) or new
    return new


def _identity(m):
    return (m.category, str(m.message), m.filename, m.lineno)


def first_call(callers: weakref.WeakSet, fn) -> bool:
    """Whether ``fn`` is new to ``callers``, noting it there. A callable
    that cannot be referenced weakly is new on every call (replayed each
    time: the filters still decide what is shown)."""
    try:
        if fn in callers:
            return False
        callers.add(fn)
    except TypeError:
        pass
    return True


def emit(messages: tuple) -> None:
    """Shows ``messages`` again, each as if issued anew where it first was."""
    for m in messages:
        module_globals = _globals_of(m.filename)
        where = {}
        if module_globals is not None:
            where["registry"] = module_globals.setdefault("__warningregistry__", {})
            where["module_globals"] = module_globals
            if type(module_globals.get("__name__")) is str:
                where["module"] = module_globals["__name__"]
        # (Without a module, warn_explicit names one after the file, as a
        # warning issued there would be: an explicit None matches no filter.)
        warnings.warn_explicit(
            m.message, m.category, m.filename, m.lineno, source=m.source, **where
        )


_MODULES: dict[str, str] = {}  # file name → the sys.modules key of what was loaded from it


def _globals_of(filename: str):
    """The globals of the module loaded from ``filename`` (whose warning
    registry a warning issued there uses), or None."""
    name = _MODULES.get(filename)
    namespace = _namespace(sys.modules.get(name)) if name is not None else None
    if namespace is None or namespace.get("__file__") != filename:
        for key, module in list(sys.modules.items()):
            namespace = _namespace(module)
            if namespace is not None and namespace.get("__file__") == filename:
                _MODULES[filename] = key
                return namespace
        return None
    return namespace


def _namespace(module) -> dict | None:
    # Read directly: sys.modules may hold objects other than modules, and a
    # lazy module's __getattr__ runs code for a missing name.
    try:
        namespace = object.__getattribute__(module, "__dict__")
    except Exception:  # noqa: BLE001 (whatever it is, it is not the module)
        return None
    return namespace if type(namespace) is dict else None
