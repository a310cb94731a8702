"""What a key is made of, in the user's names, and how two keys differ.

:func:`describe` lists every part of a callable that its key is made of —
``closure variable 'params'['h0']['w']``, ``global 'SCALE'`` — with a short
printable summary and a token (a hash of that part's key). :func:`differences`
turns two descriptions into sentences such as ``closure variable 'k' changed
2.0 → 3.0``. Both run on cache misses and on request only, never on a hit.
"""

from __future__ import annotations

import functools
import types
from typing import Any, NamedTuple

import numpy as np

from .._fingerprint.classes import ClassKey
from .._fingerprint.classify import classify
from .._fingerprint.code import code_info
from .._fingerprint.kind import LEAF, MISSING
from .._fingerprint.sinks import is_sink_key
from .._fingerprint.walk import KeyWalker

SIDE_CHANNEL = "(side channel: not keyed)"
"""Summary of a part the key leaves out (see the fingerprint's sinks)."""

# The endings of rows whose value the key holds by what its summary does not show, which
# say what changed when two such rows read the same (see _value_change).
BY_CONTENTS = ", keyed by its contents"  # a user class's row (see .._fingerprint.classes)
BAKED_CONTENTS = ", baked, keyed by its contents"  # a NumPy array a class reaches
BAKED_IDENTITY = ", baked, compared by identity"  # a JAX array a class reaches

MAX_ROWS = 2000
"""Parts listed at most (a model's parameter tree can be large)."""


class Row(NamedTuple):
    path: tuple[str, ...]
    summary: str
    token: int
    lifted: bool
    structural: bool = False
    """Whether the part is structure rather than a value: a container or
    object node, a function, a callable keyed by identity."""


HIDDEN = "\x1f"
"""Starts the labels of parts reached through library code, which
:func:`render` leaves out (they stay in paths, which must be unique)."""


def render(path: tuple[str, ...]) -> str:
    """``("closure variable 'p'", "['w']")`` → ``closure variable 'p'['w']``."""
    out = ""
    for i, label in enumerate(path):
        if label.startswith(HIDDEN):
            if i < len(path) - 1:
                continue
            label = label[len(HIDDEN) :]  # what changed is never left out
        if not out or label.startswith(("[", ".")):
            out += label
        else:
            out += " → " + label
    return out


def _short(v: Any, limit: int = 60) -> str:
    # By type(v): isinstance would read v.__class__, which may raise.
    cls = type(v)
    if issubclass(cls, types.FunctionType):
        return f"function {v.__qualname__}"
    if issubclass(cls, type):
        return f"class {v.__qualname__}"
    if issubclass(cls, types.ModuleType):
        return f"module {v.__name__}"
    try:
        text = repr(v)
    except Exception:  # noqa: BLE001 - a broken __repr__ must not break a diagnostic
        text = f"<{type(v).__qualname__} object>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _aval(v) -> str:
    aval = getattr(v, "aval", None)
    if aval is not None and hasattr(aval, "str_short"):
        return aval.str_short()
    return f"{np.dtype(v.dtype).name}{list(np.shape(v))}"


class Description:
    """The parts of a callable's key; ``str()`` of it is a readable tree.

    Attributes:
        rows: every part, in walk order: its path of labels, a summary,
            a token (equal tokens ⇔ equal key parts) and whether it is lifted.
        truncated: how many parts were left out past :data:`MAX_ROWS`.

    Example:
        >>> import jax.numpy as jnp, stablejit
        >>> w = jnp.ones(3)
        >>> d = stablejit.describe(lambda x: x * w)
        >>> name, summary = d.lifted[0]
        >>> print(name, summary)
        global 'w' float32[3]
    """

    def __init__(self, fn: Any, rows: list[Row], truncated: int):
        self.name = display_name(fn)
        self.location = location(fn)
        self.rows = rows
        self.truncated = truncated

    @property
    def lifted(self) -> list[tuple[str, str]]:
        """``(name, shape and dtype)`` of each array passed as an input."""
        return [(render(r.path), r.summary) for r in self.rows if r.lifted]

    @property
    def static(self) -> list[tuple[str, str]]:
        """``(name, value)`` of each static part of the key."""
        return [(render(r.path), r.summary) for r in self.rows if not r.lifted]

    def __str__(self) -> str:
        lines = [f"stable_jit key of {self.name}{self.location}:"]
        for r in self.rows:
            if not r.path:
                lines.append(f"  {r.summary}")
                continue
            tag = "  (lifted)" if r.lifted else ""
            lines.append(f"  {'  ' * (len(r.path) - 1)}{render(r.path[-1:])}: {r.summary}{tag}")
        if self.truncated:
            lines.append(f"  … {self.truncated} more parts")
        return "\n".join(lines)

    __repr__ = __str__


def user_function(fn: Any) -> Any:
    """The function a user wrote, under the wrappers around it: the
    ``__wrapped__`` of ``functools.wraps`` (``jax.grad``, ``jax.vmap``,
    ``jax.checkpoint`` and most decorators set it), a bound method's function."""
    seen = set()
    while id(fn) not in seen:
        seen.add(id(fn))
        inner = getattr(fn, "__wrapped__", None)
        if inner is None or not callable(inner):
            break
        fn = inner
    return getattr(fn, "__func__", fn)


def location(fn: Any) -> str:
    """`` at file.py:12`` for Python functions (and methods), else ``""``.

    For a ``functools.partial`` (a loop's bound functions), the location of
    the first function among its arguments, else of the function it wraps;
    for a wrapped function (``jax.grad(loss)``), the location of ``loss``.
    """
    fn = user_function(fn)
    if isinstance(fn, functools.partial):
        for arg in (*callables_in(fn.args), fn.func):
            where = location(arg)
            if where:
                return where
        return ""
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        return ""
    return f" at {code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"


def display_name(fn: Any) -> str:
    """``inner``, ``Model.apply``, ``while_loop(cond_fn, body_fn)``; a
    wrapped function (``jax.grad(loss)``) by the function it wraps."""
    fn = user_function(fn)
    if isinstance(fn, functools.partial):
        name = getattr(fn.func, "stablejit_name", None)
        if name is None:
            return f"partial({display_name(fn.func)})"
        return f"{name}({', '.join(display_name(a) for a in callables_in(fn.args))})"
    name = getattr(fn, "__qualname__", None)
    return name if isinstance(name, str) else type(fn).__qualname__


def callables_in(args) -> list:
    out = []
    for a in args:
        if isinstance(a, tuple):
            out += callables_in(a)
        elif callable(a):
            out.append(a)
    return out


def describe(fn: Any) -> Description:
    """Lists what the key of ``fn`` is made of (see :class:`Description`)."""
    w = KeyWalker()  # for the side channels the key leaves out
    named = user_function(fn)  # what messages name (see display_name)
    rows: list[Row] = []
    seen: set[int] = set()
    dropped = 0

    def visit(path, v, through_library=False, in_class=False):
        nonlocal dropped
        if len(rows) >= MAX_ROWS:
            dropped += 1
            return
        if (
            through_library
            and isinstance(v, types.FunctionType)
            and not code_info(v.__code__).library
        ):
            # The user's function, reached through a library's wrappers
            # (jax.grad's closures): named by itself, not by their cells,
            # unless it is the function the message is about.
            if v is not named or any(not label.startswith(HIDDEN) for label in path):
                path = (*path, f"function {v.__qualname__!r}")
        kind = classify(v)
        if kind.cyclic and id(v) in seen:
            rows.append(Row(path, "(refers back to an enclosing value)", hash("ref"), False, True))
            return
        if kind.cyclic:
            seen.add(id(v))
        parts = kind.children(w, v)
        if v is MISSING:
            rows.append(Row(path, "(unbound)", hash("missing"), False))
        elif not parts:
            key = KeyWalker().walk(v)
            if key is LEAF and in_class:
                rows.append(_baked(path, v))
            elif key is LEAF:
                rows.append(Row(path, _aval(v), hash(_aval(v)), True))
            elif is_sink_key(key):
                rows.append(Row(path, SIDE_CHANNEL, hash("sink"), False))
            elif type(key) is ClassKey:
                # A user class: the token says which class and its contents (see _value_change).
                rows.append(Row(path, f"{_short(v)}{BY_CONTENTS}", _token(key), False, True))
            else:
                rows.append(Row(path, _short(v), _token(key), False, callable(v)))
        else:
            labels = tuple(label for label, _ in parts)
            token = hash((type(v), _token(kind.node_token(v)), labels))
            rows.append(Row(path, _node_summary(v, kind), token, False, True))
            library = isinstance(v, types.FunctionType) and code_info(v.__code__).library
            # What a class reaches (its attributes, the globals its methods read) is keyed
            # apart from the call's inputs: its arrays are baked, never lifted.
            in_class = in_class or isinstance(v, type)
            for label, child in parts:
                if library:
                    # Collapse the path through library code: its cells' names
                    # ('fun', 'value_and_grad_f') say nothing to the user.
                    visit((*path, f"{HIDDEN}{v.__qualname__}: {label}"), child, True, in_class)
                else:
                    visit((*path, label), child, False, in_class)

    try:
        visit((), fn)
    except RecursionError as e:
        # What the key walk could not build either (see the runtime's Unkeyable):
        # said, not raised, as far as it got.
        rows.append(Row((), f"(its key cannot be built: {e})", hash("unkeyable"), False))
    finally:
        # visit refers to itself: unlinked, what it saw (the function) dies
        # with its last user (the cache's eviction reads liveness).
        visit = None
    return Description(fn, rows, dropped)


def _baked(path, v) -> Row:
    """The row of an array a class reaches, which its key bakes in: a JAX array compared
    by which array it is, a NumPy array (writable in place) by its contents."""
    if isinstance(v, np.ndarray):
        return Row(path, f"{_aval(v)}{BAKED_CONTENTS}", hash(v.tobytes()), False)
    return Row(path, f"{_aval(v)}{BAKED_IDENTITY}", hash(("baked", id(v))), False)


def _token(key) -> int:
    try:
        return hash(key)
    except TypeError:  # pragma: no cover - keys are hashable by construction
        return id(key)


def _node_summary(v, kind) -> str:
    if isinstance(v, types.FunctionType):
        return f"function {v.__qualname__}, code {code_info(v.__code__).digest.hex()[:8]}"
    if isinstance(v, (list, tuple, dict)) and type(v) in (list, tuple, dict):
        return f"{type(v).__name__} of {len(v)}"
    if isinstance(v, type):
        return f"class {v.__qualname__}"
    return f"{kind.name} {type(v).__qualname__}"


def differences(old: Description, new: Description) -> list[str]:
    """Sentences saying how ``new``'s key differs from ``old``'s."""
    before = {r.path: r for r in old.rows}
    after = {r.path: r for r in new.rows}
    was, now = _children(old.rows), _children(new.rows)
    out: list[str] = []
    for path, r in after.items():
        o = before.get(path)
        if o is None or o.token == r.token:
            continue  # new parts are reported by their parent's structure change
        what = render(path) or "the function"
        if o.summary.startswith("function ") and o.summary != r.summary:
            out.append(f"{what}: code changed")
        elif o.summary == SIDE_CHANNEL:
            out.append(
                f"{what} is another object than the side channel an earlier trace wrote "
                "(traced, so that this one gets its trace's writes, as under jax.jit)"
            )
        elif was.get(path, []) != now.get(path, []):
            out.append(_structure_change(what, was.get(path, []), now.get(path, [])))
        elif path not in now:
            out.append(_value_change(path, o, r))
        elif o.summary != r.summary:
            out.append(f"{what}: {o.summary} → {r.summary}")
    return out


def structure(desc: Description) -> int:
    """A token equal for two descriptions that differ in values only: the
    same functions and containers, numbers or strings that differ. What one
    function recompiling for ever looks like (a changing Python float), as
    opposed to distinct callables meeting one shared piece of code."""
    return hash(tuple((r.path, r.token if r.structural else r.lifted) for r in desc.rows))


def distance(old: Description, new: Description) -> int:
    """How many parts differ: picks the nearest old key to explain a miss by."""
    before = {r.path: r.token for r in old.rows}
    after = {r.path: r.token for r in new.rows}
    return sum(before.get(p) != t for p, t in after.items()) + len(before.keys() - after.keys())


def _children(rows: list[Row]) -> dict[tuple[str, ...], list[str]]:
    out: dict[tuple[str, ...], list[str]] = {}
    for r in rows:
        if r.path:
            out.setdefault(r.path[:-1], []).append(r.path[-1])
    return out


def _structure_change(what: str, was: list[str], now: list[str]) -> str:
    added = [c for c in now if c not in was]
    removed = [c for c in was if c not in now]
    if not added and not removed:
        return f"{what}: order changed ({', '.join(now)})"
    bits = [f"new {_part(c)}" for c in added] + [f"{_part(c)} removed" for c in removed]
    return f"{what}: structure changed ({', '.join(bits)})"


def _part(label: str) -> str:
    if label.startswith("["):
        return f"key {label[1:-1]}"
    if label.startswith("."):
        return f"attribute {label[1:]!r}"
    return label


def _value_change(path, o: Row, r: Row) -> str:
    what = render(path)
    if len(path) == 1 and path[0].startswith("global "):
        return f"{what} was rebound: {o.summary} → {r.summary}"
    if o.summary == r.summary:
        if r.summary.endswith(BAKED_IDENTITY):
            return f"{what} is another array ({r.summary})"
        if r.summary.endswith(BAKED_CONTENTS):
            return f"{what}: its contents changed ({r.summary})"
        if r.summary.endswith(BY_CONTENTS):
            return (
                f"{what}: {r.summary[: -len(BY_CONTENTS)]} changed (an attribute of it or of a "
                "base, a method, or a global its methods read), or is another class of its name"
            )
        return f"{what} changed ({r.summary}, compared by identity)"
    return f"{what} changed {o.summary} → {r.summary}"
