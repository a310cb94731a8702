"""Code objects: a structural digest and the globals a function reads.

Both are memoised per code object. A nested function reuses one code object
across every call of its enclosing function, so the bytecode of a redefined
closure is analysed once, not per call.
"""

from __future__ import annotations

import dis
import marshal
import os
import sys
import sysconfig
import types
import weakref
from typing import NamedTuple

import xxhash

_GENERATOR_FLAGS = (
    0x20  # CO_GENERATOR
    | 0x80  # CO_COROUTINE
    | 0x100  # CO_ITERABLE_COROUTINE
    | 0x200  # CO_ASYNC_GENERATOR
)

_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_GLOBAL_STORES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL"})
_DEREF_STORES = frozenset({"STORE_DEREF", "DELETE_DEREF"})
_ATTR_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})


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
    is_generator: bool
    library: bool
    """Whether the code comes from an installed library (see :func:`is_library_file`)."""
    fast: list
    """``[record, failed builds]``: the fingerprint's fast path of functions
    with this code (see ``_kinds._FastPath``); it dies with the code object."""


_INFO: dict[int, CodeInfo] = {}
_REFS: dict[int, weakref.ref] = {}


def code_info(code: types.CodeType) -> CodeInfo:
    """Returns the memoised :class:`CodeInfo` of ``code``."""
    info = _INFO.get(id(code))
    if info is None:
        info = _analyse(code)
        key = id(code)
        # The callback drops the entry when the code object dies, so a later
        # object reusing the address cannot find a stale entry.
        _REFS[key] = weakref.ref(code, lambda _, key=key: _forget(key))
        _INFO[key] = info
    return info


def _forget(key: int) -> None:
    _INFO.pop(key, None)
    _REFS.pop(key, None)


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
        is_generator=bool(code.co_flags & _GENERATOR_FLAGS),
        library=is_library_file(code.co_filename),
        fast=[None, 0],
    )


def _scan(code, names, chains, global_stores, deref_stores, top):
    chain: list[str] | None = None
    for ins in dis.get_instructions(code):
        op = ins.opname
        if op in _GLOBAL_LOADS:
            names[ins.argval] = None
            if chain:
                chains[tuple(chain)] = None
            chain = [ins.argval]
            continue
        if op in _ATTR_LOADS and chain is not None:
            chain.append(ins.argval)
            continue
        if chain:
            chains[tuple(chain)] = None
        chain = None
        if op in _GLOBAL_STORES:
            global_stores.add(ins.argval)
        elif top and op in _DEREF_STORES and ins.argval in code.co_freevars:
            deref_stores.add(ins.argval)
    if chain:
        chains[tuple(chain)] = None
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            # Nested code runs with the same globals, so its reads count too.
            _scan(const, names, chains, global_stores, deref_stores, top=False)


def _structure(code: types.CodeType) -> tuple:
    """A marshal-able tuple of the code's semantics, without file or lines."""
    consts = tuple(_const(c) for c in code.co_consts)
    return (
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


_LIBRARY_DIRS = tuple(
    sorted(
        {
            os.path.normcase(os.path.realpath(p))
            for name in ("stdlib", "platstdlib", "purelib", "platlib")
            if (p := sysconfig.get_paths().get(name))
        }
        | {
            os.path.normcase(os.path.realpath(p))
            for p in sys.path
            if p.rstrip("/").endswith(("site-packages", "dist-packages"))
        }
    )
)
_LIBRARY_FILES: dict[str, bool] = {}


def is_library_file(filename: str) -> bool:
    """Whether code from ``filename`` belongs to an installed library.

    Module-level functions of installed libraries (jax, numpy, the standard
    library…) are keyed by identity; everything else is fingerprinted by
    structure, so editing or monkeypatching user code is always seen.
    """
    lib = _LIBRARY_FILES.get(filename)
    if lib is None:
        if filename.startswith("<frozen"):
            lib = True
        elif filename.startswith("<"):
            lib = False
        else:
            path = os.path.normcase(os.path.realpath(filename))
            lib = any(path.startswith(d + os.sep) for d in _LIBRARY_DIRS)
        _LIBRARY_FILES[filename] = lib
    return lib
