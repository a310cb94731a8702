"""Code objects: a structural digest and the globals a function reads.

Both are memoised per code object. A nested function reuses one code object
across every call of its enclosing function, so the bytecode of a redefined
closure is analysed once, not per call.
"""

from __future__ import annotations

import dis
import functools
import marshal
import sys
import types
import weakref
from typing import NamedTuple

import xxhash

from .._registry import on_clear
from .library import is_library_file

# The opcodes the scan acts on, and how each one's argument names something.
# The bytecode is read directly, not through dis.get_instructions: that
# builds an Instruction per opcode with line and position data, ~1 ms per
# function, which a fresh process (persistent mode) pays for every function
# it keys on its first call.
_OP = dis.opmap
_EXTENDED_ARG = dis.EXTENDED_ARG
_CACHE = _OP.get("CACHE", -1)  # 3.11+: inline cache entries follow some opcodes
_SHIFT_GLOBAL = 1 if sys.version_info >= (3, 11) else 0  # low bit: push NULL
_SHIFT_ATTR = 1 if sys.version_info >= (3, 12) else 0  # low bit: method load
_GLOBAL_LOADS = {_OP["LOAD_GLOBAL"]: _SHIFT_GLOBAL, _OP["LOAD_NAME"]: 0}
_ATTR_LOADS = {_OP["LOAD_ATTR"]: _SHIFT_ATTR}
if "LOAD_METHOD" in _OP:  # up to 3.11
    _ATTR_LOADS[_OP["LOAD_METHOD"]] = 0
_GLOBAL_STORES = frozenset({_OP["STORE_GLOBAL"], _OP["DELETE_GLOBAL"]})
_DEREF_STORES = frozenset({_OP["STORE_DEREF"], _OP["DELETE_DEREF"]})


class CodeInfo(NamedTuple):
    """What stablejit needs to know about one code object."""

    digest: bytes
    """128-bit digest of everything that decides what the code computes."""
    global_names: tuple[str, ...]
    """Globals read by the code or by code nested in it, in first-use order."""
    attr_chains: tuple[tuple[str, ...], ...]
    """``(global, attr, attr, ...)`` chains such as ``config.SCALE``."""
    global_stores: frozenset[str]
    """Globals the code assigns or deletes (``global x; x = ...``)."""
    deref_stores: frozenset[str]
    """Free variables the code itself assigns (``nonlocal x; x = ...``)."""
    free_names: tuple[str, ...]
    """``co_freevars``, which Python 3.11+ builds anew on every read."""
    library: bool
    """Whether the code comes from an installed library (see :func:`is_library_file`)."""
    fast: FastRecords
    """The fingerprint's fast-path records of functions with this code (see
    :mod:`.records`); they die with the code object."""


class FastRecords:
    """Per code object: the fast path's current record, how many builds
    failed, and the other records kept (see :mod:`.records`); ``call``:
    the current record's call function, read where a jitted function is made
    (see the runtime's ``jitted``)."""

    __slots__ = ("front", "failures", "others", "call")

    def __init__(self):
        self.front = None
        self.failures = 0
        self.others: tuple = ()
        self.call = None


INFO: dict[int, CodeInfo] = {}
"""id(code) → its :class:`CodeInfo`: the hot path reads this directly."""
_REFS: dict[int, weakref.ref] = {}


def code_info(code: types.CodeType) -> CodeInfo:
    """Returns the memoised :class:`CodeInfo` of ``code``."""
    info = INFO.get(id(code))
    if info is None:
        info = _analyse(code)
        key = id(code)
        # The callback drops the entry when the code object dies, so a later
        # object reusing the address cannot find a stale entry.
        _REFS[key] = weakref.ref(code, functools.partial(_forget, key))
        INFO[key] = info
    return info


def _forget(key: int, _ref=None, _info=INFO, _refs=_REFS) -> None:
    # The dicts are bound here: callbacks of code objects that die at
    # interpreter exit run after this module's globals are cleared.
    _info.pop(key, None)
    _refs.pop(key, None)


def _analyse(code: types.CodeType) -> CodeInfo:
    names: dict[str, None] = {}
    chains: dict[tuple[str, ...], None] = {}
    global_stores: set[str] = set()
    deref_stores: set[str] = set()
    _scan(code, names, chains, global_stores, deref_stores, top=True)
    return CodeInfo(
        digest=xxhash.xxh3_128_digest(marshal.dumps(_structure(code))),
        global_names=tuple(names),
        attr_chains=tuple(c for c in chains if len(c) > 1),
        global_stores=frozenset(global_stores),
        deref_stores=frozenset(deref_stores),
        free_names=code.co_freevars,
        library=is_library_file(code.co_filename),
        fast=FastRecords(),
    )


def _instructions(code):
    """``(opcode, argument)`` of ``code``, extended arguments folded in and
    inline cache entries left out."""
    raw = code.co_code
    ext = 0
    for i in range(0, len(raw), 2):
        op = raw[i]
        if op == _EXTENDED_ARG:
            ext = (ext | raw[i + 1]) << 8
            continue
        if op != _CACHE:
            yield op, ext | raw[i + 1]
        ext = 0


def _deref_name(code, arg: int) -> str:
    if sys.version_info >= (3, 11):  # an index into all of the frame's variables
        return code._varname_from_oparg(arg)
    return (code.co_cellvars + code.co_freevars)[arg]


def _scan(code, names, chains, global_stores, deref_stores, top):
    co_names = code.co_names
    chain: list[str] | None = None
    for op, arg in _instructions(code):
        shift = _GLOBAL_LOADS.get(op)
        if shift is not None:
            name = co_names[arg >> shift]
            names[name] = None
            if chain:
                chains[tuple(chain)] = None
            chain = [name]
            continue
        if chain is not None:
            shift = _ATTR_LOADS.get(op)
            if shift is not None:
                chain.append(co_names[arg >> shift])
                continue
            chains[tuple(chain)] = None
            chain = None
        if op in _GLOBAL_STORES:
            global_stores.add(co_names[arg])
        elif top and op in _DEREF_STORES:
            name = _deref_name(code, arg)
            if name in code.co_freevars:
                deref_stores.add(name)
    if chain:
        chains[tuple(chain)] = None
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            # Nested code runs with the same globals, so its reads count too.
            _scan(const, names, chains, global_stores, deref_stores, top=False)


def _structure(code: types.CodeType) -> tuple:
    """A marshal-able tuple of the code's semantics, without file or lines.

    With its name: JAX names a program after its function (the module in
    ``lower(...).as_text()``, HLO dumps and profiles, a nested ``jit``
    equation's ``name=``, its messages), so two functions of one body under
    two names (``lambda x: x * 2`` and ``def double(x)``) are two programs,
    as under ``jax.jit``. A function defined again keeps its name.
    """
    consts = tuple(_const(c) for c in code.co_consts)
    return (
        code.co_name,
        code.co_code,
        consts,
        code.co_names,
        code.co_varnames,
        code.co_freevars,
        code.co_cellvars,
        code.co_argcount,
        code.co_posonlyargcount,
        code.co_kwonlyargcount,
        code.co_nlocals,
        code.co_flags,
        getattr(code, "co_exceptiontable", b""),
    )


def _const(c):
    # Every constant is tagged by its kind, so no constant of one kind can
    # pass for another (a tuple spelling a tag, say).
    if isinstance(c, types.CodeType):
        return ("code", _structure(c))
    if isinstance(c, frozenset):
        # ``x in {"a", "b"}``: marshal writes a set in hash order, which
        # differs between processes (PYTHONHASHSEED); the digest must not.
        return ("frozenset", tuple(sorted((_const(x) for x in c), key=repr)))
    if isinstance(c, tuple):
        return ("tuple", tuple(_const(x) for x in c))
    return ("value", c)


def forget_records() -> None:
    """Drops every code's fast-path records: their guards hold what each
    child's kind said when they were built, so a change of kinds
    (``register_type``) voids them. Their entries are emptied too, as the
    call functions made from them (held by jitted functions) look there
    first: they then hand every call to the general path."""
    for info in list(INFO.values()):
        fast = info.fast
        for record in (fast.front, *fast.others):
            if record is not None:
                record.entries.clear()
        fast.front, fast.others, fast.call, fast.failures = None, (), None, 0


@on_clear
def _clear() -> None:
    # Fast-path records (on each CodeInfo) point at cache entries.
    INFO.clear()
    _REFS.clear()
