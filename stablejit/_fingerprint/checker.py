"""Compiles a fast-path record's guards into one straight-line Python function.

A record re-checked slot by slot costs a Python call per slot (and per item
of a container), which is most of a hit's time for a closure over a params
dict or a chain of optax closures. As TorchDynamo does with its guards, a
record that keeps matching gets its checks written out as the source of one
function — type and length tests, identity tests against constants, one
C-level pass over a container of arrays — and compiled once. The result
means exactly what the record's interpreted ``match`` means (the guards in
:mod:`.guards`); what the generator has no code for, or what would make the
function long, is a call of that guard's own ``fits``.

The generated function takes ``(fn, leaves, sinks, seen=None)`` and returns
the record's key, or None after undoing what it appended and numbered.
"""

from __future__ import annotations

import operator
import types
from itertools import count

from .guards import (
    ATOM_TYPES,
    CHECKED_SLOTS,
    LEAF_SLOT,
    LEAVES,
    SAME,
    DictSlot,
    FunctionSlot,
    HostArraySlot,
    LiftedSlot,
    ListSlot,
    ObjectSlot,
    RefSlot,
    TupleSlot,
    get_attr,
    same_atom,
    same_defaults,
    same_names,
    undo,
)
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
    with numbers in locals does not have (see :class:`_Writer`)."""


class _Writer:
    """The source being written: lines, constants, and names for both
    (``fail``: the statement that ends the function when a check fails).

    ``local_numbers``: the functions, lists, dicts and objects that the walk
    numbers are numbered in locals, by their place in the straight-line code,
    instead of in a ``seen`` dict: a back reference is then an identity
    test, and that none was met twice (nor is a side channel) is tested once
    at the end. Only for a function that is the walk's start and calls out
    to nothing that takes ``seen`` (else :class:`_NeedsSeen`)."""

    def __init__(self, fail: str, local_numbers: bool = False):
        self.fail = fail
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
            "_get": get_attr,
            "_same_atom": same_atom,
            "_same_names": same_names,
        }
        self.names = count()
        self.budget = INLINE_ITEMS
        # Globals already checked in this function, where the very object is
        # expected: nested functions of one module read one globals dict
        # (checked to be that very dict), so ``jnp`` is checked once.
        self.globals_checked: set[tuple[int, str, int]] = set()
        self.sinks_checked: set[int] = set()

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
        return f"id({v}) != {self.numbered[n]}"

    def fail_if(self, indent: int, cond: str) -> None:
        self.line(indent, f"if {cond}:")
        self.line(indent + 1, self.fail)


def _items(w: _Writer, i: int, slot, v: str, values: str, getters) -> None:
    """The items of container ``v`` (``values``: an expression iterating
    them; ``getters``: an expression per item)."""
    mode = slot.mode
    if mode is LEAVES:
        w.fail_if(i, f"not _LEAF_TYPES.issuperset(map(type, {values}))")
        w.line(i, f"leaves.extend({values})")
        return
    s = w.const(slot)
    if mode is SAME:
        same = f"all(map(_is, {values}, {w.const(slot.items)}))"
        # (Items that are all atoms or kept by identity: their check numbers nothing.)
        w.fail_if(i, f"not {same} and not {s}.items_fit({values}, leaves, sinks, None)")
        return
    if len(slot.items) > w.budget or (slot.batch is not None and len(slot.items) >= BATCH_ITEMS):
        w.fail_if(i, f"not {s}.items_fit({values}, leaves, sinks, {w.seen})")
        return
    w.budget -= len(slot.items)
    for get, item in zip(getters, slot.items, strict=True):
        x = w.var()
        w.line(i, f"{x} = {get}")
        _emit(w, i, item, x)


def _emit(w: _Writer, i: int, slot, v: str) -> None:
    """Lines that fail unless the value in variable ``v`` fits ``slot``."""
    t = type(slot)
    if slot is LEAF_SLOT:
        w.fail_if(i, f"type({v}) not in _LEAF_TYPES")
        w.line(i, f"leaves.append({v})")
    elif t in ATOM_TYPES:
        c = w.const(slot)
        w.fail_if(i, f"{v} is not {c} and not _same_atom({v}, {c})")
    elif t is TupleSlot:
        n = len(slot.items)
        w.fail_if(i, f"type({v}) is not {w.const(slot.type)} or len({v}) != {n}")
        _items(w, i, slot, v, v, [f"{v}[{k}]" for k in range(n)])
    elif t is ListSlot:
        n = len(slot.items)
        w.fail_if(i, f"type({v}) is not list or len({v}) != {n}")
        w.fresh(i, v, container=True)
        _items(w, i, slot, v, v, [f"{v}[{k}]" for k in range(n)])
    elif t is DictSlot:
        keys = w.const(slot.keys)
        w.fail_if(i, f"type({v}) is not dict or len({v}) != {len(slot.keys)}")
        w.fail_if(i, f"not all(map(_is, {v}, {keys})) and not _same_names({v}, {keys})")
        w.fresh(i, v, container=True)
        getters = [f"{v}[{w.const(k)}]" for k in slot.keys]
        _items(w, i, slot, v, f"{v}.values()", getters)
    elif t is ObjectSlot:
        cls = w.const(slot.cls)
        w.fail_if(i, f"type({v}) is not {cls} or _TABLE.get({cls}) is not {w.const(slot.kind)}")
        w.fresh(i, v, container=False)
        d = w.var()
        w.line(i, f"{d} = _get({v}, '__dict__')")
        _emit(w, i, slot.state, d)
    elif t is FunctionSlot:
        code = w.const(slot.code)
        w.fail_if(i, f"type({v}) is not _Function or {v}.__code__ is not {code}()")
        w.fresh(i, v, container=False)
        record = slot.record
        if _size(record) <= w.budget:  # its checks inline: no call per nested function
            w.budget -= _size(record)
            _emit_record(w, i, record, v)
        else:
            w.fail_if(i, f"{w.const(record)}.match({v}, leaves, sinks, {w.seen}) is None")
    elif t is RefSlot:
        w.fail_if(i, w.back_reference(v, slot.n))
    elif t is LiftedSlot:
        w.fail_if(i, f"type({v}) is not {w.const(slot.type)}")
        w.line(i, f"leaves.append({v})")
    elif t is HostArraySlot:
        w.fail_if(i, f"not {w.const(slot)}.fits({v}, leaves, sinks, None)")
    else:  # a value keyed by identity (a sink, a library's jitted function)
        w.fail_if(i, f"{v} is not {w.const(slot)}")


def _emit_record(w: _Writer, i: int, record, fn: str) -> None:
    """Lines that fail unless function ``fn`` fits ``record``'s checks (those
    of a nested function's record written out in its parent's function)."""
    same = w.const(same_defaults)
    header = f"id({fn}.__globals__) != {record.g_id} or id({fn}.__builtins__) != {record.b_id}"
    for attr, expected in (
        ("__defaults__", record.defaults),
        ("__kwdefaults__", record.kwdefaults),
    ):
        d, e = f"{fn}.{attr}", w.const(expected)
        header += f" or ({d} is not {e} and not {same}({d}, {e}))"
    header += f" or {fn}.__dict__"
    if id(record.sinks) not in w.sinks_checked:
        header += f" or sinks is not {w.const(record.sinks)}"
        w.sinks_checked.add(id(record.sinks))
    w.fail_if(i, header)
    todo = []
    for name, slot in record.globals:
        once = type(slot) in ATOM_TYPES or not _checks_inside(slot)
        done = (record.g_id, name, id(slot))
        if not (once and done in w.globals_checked):
            todo.append((name, slot))
            if once:
                w.globals_checked.add(done)
    if todo:
        g, b = w.var(), w.var()
        w.line(i, f"{g}, {b} = {fn}.__globals__, {fn}.__builtins__")
        for name, slot in todo:
            v = w.var()
            w.line(i, f"{v} = {g}.get({name!r}, _MISSING)")
            w.line(i, f"if {v} is _MISSING:")
            w.line(i + 1, f"{v} = {b}.get({name!r}, _MISSING)")
            _emit(w, i, slot, v)
    if record.cells:
        c = w.var()
        w.line(i, f"{c} = {fn}.__closure__")
        for k, slot in enumerate(record.cells):
            v = w.var()
            w.line(i, "try:")
            w.line(i + 1, f"{v} = {c}[{k}].cell_contents")
            w.line(i, "except ValueError:")
            w.line(i + 1, f"{v} = _MISSING")
            _emit(w, i, slot, v)


def _checks_inside(slot) -> bool:
    """Whether checking ``slot`` does more than compare identity (collects
    leaves, numbers or re-checks children): such checks run at every place."""
    return slot is LEAF_SLOT or type(slot) in CHECKED_SLOTS


def _size(record) -> int:
    return 1 + len(record.globals) + len(record.cells)


def _compile(record, head, prologue, fail, epilogue, consts, filename, starts=False):
    """One function: ``head``, then ``prologue``, then ``record``'s checks
    (each failing with ``fail``), then the lines ``epilogue(uses_leaves)``
    gives (``uses_leaves``: whether any check collects arrays). If
    ``starts``, the function is where a walk starts: it binds ``leaves``
    itself, and numbers in locals where it can (see :class:`_Writer`)."""
    try:
        w = _write(record, prologue, fail, starts, local_numbers=starts)
    except _NeedsSeen:
        w = _write(record, prologue, fail, starts, local_numbers=False)
    w.consts.update(consts)
    key = w.const(record.key)
    for text in epilogue(w.uses_leaves):
        w.line(1, text.format(key=key))
    source = head + "\n" + "\n".join(w.lines) + "\n"
    namespace = dict(w.consts)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102
    return namespace[head[4 : head.index("(")]]


def _write(record, prologue, fail, starts, local_numbers) -> _Writer:
    w = _Writer(fail, local_numbers)
    w.budget -= _size(record)
    for text in prologue:
        w.line(1, text)
    start = len(w.lines)
    if record.nested and not local_numbers:
        if not starts:
            w.line(1, "if seen is None:")
        w.line(1 + (not starts), "seen = {id(fn): 0}")  # a walk from ``fn`` numbers it first
    _emit_record(w, 1, record, "fn")
    if local_numbers and len(w.numbered) > 1:
        # Nothing met twice (the walk would have keyed a back reference), no
        # list or dict a side channel.
        distinct = f"len({{{', '.join(w.numbered)}}}) != {len(w.numbered)}"
        if w.containers:
            distinct += f" or (sinks and not sinks.keys().isdisjoint(({', '.join(w.containers)},)))"
        w.fail_if(1, distinct)
    w.uses_leaves = any("leaves" in text for text in w.lines[start:])
    if w.uses_leaves and starts:
        w.lines.insert(start, "    leaves = []")
    return w


CALL_FILENAME = "<stablejit call>"
"""The file name of the call functions compiled here: a frame running one
is a stablejit call's (see the runtime's ``current_callable``)."""


def compile_match(record):
    """``record``'s checks (see :class:`.fastpath.FastPath`) as one function
    of ``(fn, leaves, sinks, seen=None)`` returning its key or None."""
    return _compile(
        record,
        "def match(fn, leaves, sinks, seen=None):",
        ["n, n_seen = len(leaves), (len(seen) if seen is not None else 0)"],
        "return _fail(leaves, n, seen, n_seen)",
        lambda uses_leaves: ["return {key}"],
        {},
        "<stablejit fast-path record>",
    )


def compile_call(record, prologue: list[str], fail: str, epilogue, consts: dict):
    """``record``'s checks inside a caller's own function of ``(fn, opts,
    *args, **kwargs)``: its ``prologue`` (which must bind ``sinks``), the
    checks, each failing with ``fail``, and its ``epilogue`` (see
    :func:`_compile`). One Python frame between a call and what it calls,
    instead of a match and its caller."""
    head = "def call(fn, opts, /, *args, **kwargs):"
    return _compile(record, head, prologue, fail, epilogue, consts, CALL_FILENAME, True)
