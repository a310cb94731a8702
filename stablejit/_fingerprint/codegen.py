"""Writes a record's guards as one straight-line Python function, and compiles it.

A record re-checked guard by guard costs a Python call per guard (and per
item of a container), which is most of a hit's time for a closure over a
params dict or a chain of optax closures. As TorchDynamo does with its
guards, a record that keeps matching gets its checks written out as the
source of one function — type and length tests, identity tests against
constants, one C-level pass over a container of arrays — and compiled once.
Each kind of guard writes its own lines (``Guard.emit``, beside its
reference check in :mod:`.guards`); this module holds the :class:`Writer`
they write through, the loop over a record's children, and the compiling.
What would make the function long is a call of that guard's own ``fits``.

The generated function takes ``(fn, leaves, sinks, seen=None)`` and returns
the record's key, or None after undoing what it appended and numbered.
"""

from __future__ import annotations

import operator
import types
from itertools import count

from .container_guards import LEAVES, SAME
from .guards import ANY_ARRAY, ATOM_TYPES, GUARD_TYPES, same_atom, same_defaults, undo
from .kind import LEAF_TYPES, MISSING, TABLE

INLINE_ITEMS = 200
"""Items written out one by one per record; past that, containers are
checked by their guards' own code (a record over thousands of items
compiles to a short loop, not thousands of lines)."""

BATCH_ITEMS = 8
"""Items from which a container whose items are all dicts of arrays or plain
objects is checked by its bulk pass (see the guards' ``_Items.batch``),
written out or not: a few C-level passes over all of them cost about a
microsecond, more than a few written out one by one."""


class _NeedsSeen(Exception):
    """Raised where a check needs the ``seen`` dict that a function written
    with numbers in locals does not have (see :class:`Writer`)."""


FAIL = "@fail"
"""Where a check that fails ends the function: each function compiled from
the written lines puts its own statement there (never Python, so never
anything else in the lines)."""


class Writer:
    """The source being written: lines, constants, and names for both; what
    the guards' ``emit`` write through.

    ``local_numbers``: the functions, lists, dicts and objects that the walk
    numbers are numbered in locals, by their place in the straight-line code,
    instead of in a ``seen`` dict: a back reference is then an identity
    test, and that none was met twice (nor is a side channel) is tested once
    at the end. Only for a function that is the walk's start and calls out
    to nothing that takes ``seen`` (else :class:`_NeedsSeen`)."""

    def __init__(self, local_numbers: bool = False):
        self.numbered: list[str] | None = ["id(fn)"] if local_numbers else None
        self.containers: list[str] = []
        self.uses_leaves = False
        self.lines: list[str] = []
        self.consts: dict[str, object] = {
            "_fail": undo,
            "_is": operator.is_,
            "_LEAF_TYPES": LEAF_TYPES,
            "_TABLE": TABLE,
            "_MISSING": MISSING,
            "_Function": types.FunctionType,
            "_same_atom": same_atom,
        }
        self.names = count()
        self.budget = INLINE_ITEMS
        # Globals already checked in this function, where the very object is
        # expected: nested functions of one module read one globals dict
        # (checked to be that very dict), so ``jnp`` is checked once.
        self.globals_checked: set[tuple[int, str, int]] = set()
        self.sinks_checked: set[int] = set()
        # Locals holding what the checks made (a pytree node's flatten), which
        # a walk would keep alive to its end (see .pytree_guards).
        self.kept: list[str] = []

    def const(self, obj) -> str:
        name = f"_c{next(self.names)}"
        self.consts[name] = obj
        return name

    def var(self) -> str:
        return f"v{next(self.names)}"

    def line(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    @property
    def seen(self) -> str:
        """The ``seen`` argument of a call-out that may number objects."""
        if self.numbered is not None:
            raise _NeedsSeen
        return "seen"

    def fresh(self, i: int, v: str, container: bool) -> None:
        """Fails if ``v`` was numbered before (or, for a list or dict, is a
        side channel), then numbers it, as the walk numbers what it meets."""
        if self.numbered is None:
            sink = f" or (sinks and id({v}) in sinks)" if container else ""
            self.fail_if(i, f"id({v}) in seen{sink}")
            self.line(i, f"seen[id({v})] = len(seen)")
            return
        x = self.var()
        self.line(i, f"{x} = id({v})")
        self.numbered.append(x)
        if container:
            self.containers.append(x)

    def back_reference(self, v: str, n: int) -> str:
        """A condition: ``v`` is not the object numbered ``n``."""
        if self.numbered is None:
            return f"seen.get(id({v}), -1) != {n}"
        if n >= len(self.numbered):
            return "True"  # nothing is numbered n yet (a record made inside another walk)
        return f"id({v}) != {self.numbered[n]}"

    def fail_if(self, indent: int, cond: str) -> None:
        self.line(indent, f"if {cond}:")
        self.line(indent + 1, FAIL)

    def value(self, i: int, guard, v: str) -> None:
        """Lines that fail unless the value in variable ``v`` fits ``guard``:
        the three plain guards here, every other kind's own ``emit``."""
        t = type(guard)
        if guard is ANY_ARRAY:
            self.fail_if(i, f"type({v}) not in _LEAF_TYPES")
            self.line(i, f"leaves.append({v})")
        elif t in ATOM_TYPES:
            c = self.const(guard)
            self.fail_if(i, f"{v} is not {c} and not _same_atom({v}, {c})")
        elif t in GUARD_TYPES:
            guard.emit(self, i, v)
        else:  # a value keyed by identity (a sink, a library's jitted function)
            self.fail_if(i, f"{v} is not {self.const(guard)}")

    def items(self, i: int, guard, values: str, getters) -> None:
        """The items of a container guard's value (``values``: an expression
        iterating them; ``getters``: an expression per item)."""
        mode = guard.mode
        if mode is LEAVES:
            self.fail_if(i, f"not _LEAF_TYPES.issuperset(map(type, {values}))")
            self.line(i, f"leaves.extend({values})")
            return
        g = self.const(guard)
        if mode is SAME:
            same = f"all(map(_is, {values}, {self.const(guard.items)}))"
            # (Items that are all atoms or kept by identity: their check numbers nothing.)
            self.fail_if(i, f"not {same} and not {g}.items_fit({values}, leaves, sinks, None)")
            return
        n = len(guard.items)
        if n > self.budget or (guard.batch is not None and n >= BATCH_ITEMS):
            self.fail_if(i, f"not {g}.items_fit({values}, leaves, sinks, {self.seen})")
            return
        self.budget -= n
        for get, item in zip(getters, guard.items, strict=True):
            x = self.var()
            self.line(i, f"{x} = {get}")
            self.value(i, item, x)

    def nested_record(self, i: int, record, fn: str) -> None:
        """Lines that fail unless nested function ``fn`` fits ``record``:
        its checks written out here if they are few (no call per nested
        function), else a call of its ``match``."""
        if _size(record) <= self.budget:
            self.budget -= _size(record)
            self.record(i, record, fn)
        else:
            self.fail_if(i, f"{self.const(record)}.match({fn}, leaves, sinks, {self.seen}) is None")

    def record(self, i: int, record, fn: str) -> None:
        """Lines that fail unless function ``fn`` fits ``record``'s checks."""
        same = self.const(same_defaults)
        header = f"id({fn}.__globals__) != {record.g_id} or id({fn}.__builtins__) != {record.b_id}"
        for attr, expected in (
            ("__defaults__", record.defaults),
            ("__kwdefaults__", record.kwdefaults),
        ):
            d, e = f"{fn}.{attr}", self.const(expected)
            header += f" or ({d} is not {e} and not {same}({d}, {e}))"
        if record.attrs is None:
            header += f" or {fn}.__dict__"
        if id(record.sinks) not in self.sinks_checked:
            header += f" or sinks is not {self.const(record.sinks)}"
            self.sinks_checked.add(id(record.sinks))
        self.fail_if(i, header)
        if record.kwdefaults is not None:  # a dict, numbered right after the function
            self.fresh(i, f"{fn}.__kwdefaults__", container=True)
        todo = []
        for name, guard in record.globals:
            once = type(guard) in ATOM_TYPES or not _checks_inside(guard)
            done = (record.g_id, name, id(guard))
            if not (once and done in self.globals_checked):
                todo.append((name, guard))
                if once:
                    self.globals_checked.add(done)
        if todo:
            g, b = self.var(), self.var()
            self.line(i, f"{g}, {b} = {fn}.__globals__, {fn}.__builtins__")
            for name, guard in todo:
                v = self.var()
                self.line(i, f"{v} = {g}.get({name!r}, _MISSING)")
                self.line(i, f"if {v} is _MISSING:")
                self.line(i + 1, f"{v} = {b}.get({name!r}, _MISSING)")
                self.value(i, guard, v)
        if record.cells:
            c = self.var()
            self.line(i, f"{c} = {fn}.__closure__")
            for k, guard in enumerate(record.cells):
                v = self.var()
                self.line(i, "try:")
                self.line(i + 1, f"{v} = {c}[{k}].cell_contents")
                self.line(i, "except ValueError:")
                self.line(i + 1, f"{v} = _MISSING")
                self.value(i, guard, v)
        if record.attrs is not None:  # after the cells, in the walk's order
            v = self.var()
            self.line(i, f"{v} = {fn}.__dict__")
            self.value(i, record.attrs, v)


def _checks_inside(guard) -> bool:
    """Whether checking ``guard`` does more than compare identity (collects
    leaves, numbers or re-checks children): such checks run at every place."""
    return guard is ANY_ARRAY or type(guard) in GUARD_TYPES


def _size(record) -> int:
    return 1 + len(record.globals) + len(record.cells) + (record.attrs is not None)


def _write(record, starts: bool) -> Writer:
    """``record``'s checks, each failing at :data:`FAIL`. If ``starts``, the
    function is where a walk starts: it binds ``leaves`` itself, and numbers
    in locals where it can (see :class:`Writer`)."""
    if starts:
        try:
            return _write_with(record, starts, local_numbers=True)
        except _NeedsSeen:
            pass
    return _write_with(record, starts, local_numbers=False)


def _write_with(record, starts, local_numbers) -> Writer:
    w = Writer(local_numbers)
    w.budget -= _size(record)
    if record.nested and not local_numbers:
        if not starts:
            w.line(1, "if seen is None:")
        w.line(1 + (not starts), "seen = {id(fn): 0}")  # a walk from ``fn`` numbers it first
    w.record(1, record, "fn")
    if local_numbers and len(w.numbered) > 1:
        # Nothing met twice (the walk would have keyed a back reference), no
        # list or dict a side channel.
        distinct = f"len({{{', '.join(w.numbered)}}}) != {len(w.numbered)}"
        if w.containers:
            distinct += f" or (sinks and not sinks.keys().isdisjoint(({', '.join(w.containers)},)))"
        w.fail_if(1, distinct)
    w.uses_leaves = any("leaves" in text for text in w.lines)
    if w.uses_leaves and starts:
        w.lines.insert(0, "    leaves = []")
    return w


def _numbering(w: Writer, record) -> str:
    """An expression of the ids that a match's checks numbered, in order."""
    if w.numbered is not None:
        return f"[{', '.join(w.numbered)}]"
    return "list(seen)" if record.nested else "[id(fn)]"


def _compile(w: Writer, head: str, prologue, fail: str, epilogue, consts: dict, filename: str):
    """One function: ``head``, then ``prologue``, then the checks ``w``
    wrote (each failing with ``fail``), then ``epilogue``'s lines."""
    lines = ["    " + text for text in prologue]
    lines += [text.replace(FAIL, fail) for text in w.lines]
    lines += ["    " + text for text in epilogue]
    source = head + "\n" + "\n".join(lines) + "\n"
    namespace = {**w.consts, **consts}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102
    return namespace[head[4 : head.index("(")]]


CALL_FILENAME = "<stablejit call>"
"""The file name of the call functions compiled here: a frame running one
is a stablejit call's (see the runtime's ``current_callable``)."""


def compile_match(record):
    """``record``'s checks (see :class:`.records.Record`) as one function
    of ``(fn, leaves, sinks, seen=None)`` returning its key or None."""
    w = _write(record, starts=False)
    return _compile(
        w,
        "def match(fn, leaves, sinks, seen=None):",
        ["n, n_seen = len(leaves), (len(seen) if seen is not None else 0)"],
        "return _fail(leaves, n, seen, n_seen)",
        [f"return {w.const(record.key)}"],
        {},
        "<stablejit record>",
    )


def compile_call(record, prologue: list[str], fail: str, epilogue, consts: dict):
    """``record``'s checks inside a caller's own function of ``(fn, opts,
    *args, **kwargs)``: its ``prologue`` (which must bind ``sinks``), the
    checks, each failing with ``fail``, and the lines ``epilogue(uses_leaves)``
    gives (``uses_leaves``: whether any check collects arrays). One Python
    frame between a call and what it calls, instead of a match and its
    caller."""
    w = _write(record, starts=True)
    head = "def call(fn, opts, /, *args, **kwargs):"
    return _compile(w, head, prologue, fail, epilogue(w.uses_leaves), consts, CALL_FILENAME)


def compile_call_check(record):
    """The checks :func:`compile_call` writes for ``record``, the very same
    lines, as a function of ``(fn, sinks)`` returning ``(key, leaves,
    numbering)`` (the ids the checks numbered, in order) or None: what a
    call function decides, for tests and ``config.check_records``."""
    w = _write(record, starts=True)
    leaves = "leaves" if w.uses_leaves else "[]"
    back = f"return {w.const(record.key)}, {leaves}, {_numbering(w, record)}"
    return _compile(w, "def check(fn, sinks):", [], "return None", [back], {}, "<stablejit check>")


def compile_guard(guard, hold, consts: dict):
    """``guard``'s own checks (its ``emit_body``), written out with a budget
    of their own, as a function of ``(v, leaves, sinks, seen)``: True if
    ``v`` fits, having run ``hold(locals)`` on the names of what the checks
    made (``consts``: names it uses); else False. For a guard too large to be written out inside a
    record's function, which calls this instead."""
    w = Writer()
    guard.emit_body(w, 1, "v")
    epilogue = [hold(w.kept), "return True"]
    head = "def fits(v, leaves, sinks, seen):"
    return _compile(w, head, [], "return False", epilogue, consts, "<stablejit guard>")
