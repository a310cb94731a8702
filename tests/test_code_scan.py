"""The bytecode scan of _code against ``dis``, on every Python version the
suite runs on: what a function reads and writes decides what its key holds."""

from __future__ import annotations

import dis
import importlib
import types

import pytest

from stablejit._fingerprint import code as _code

_GLOBAL_LOADS = {"LOAD_GLOBAL", "LOAD_NAME"}
_ATTR_LOADS = {"LOAD_ATTR", "LOAD_METHOD"}


def _reference(code, names, chains, stores, derefs, top=True):
    """The same scan through dis.get_instructions, the documented decoder."""
    chain = None
    for ins in dis.get_instructions(code):
        if ins.opname == "EXTENDED_ARG":  # a prefix of the next instruction's argument
            continue
        if ins.opname in _GLOBAL_LOADS:
            names[ins.argval] = None
            if chain:
                chains[tuple(chain)] = None
            chain = [ins.argval]
            continue
        if ins.opname in _ATTR_LOADS and chain is not None:
            chain.append(ins.argval)
            continue
        if chain:
            chains[tuple(chain)] = None
        chain = None
        if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL"):
            stores.add(ins.argval)
        elif top and ins.opname in ("STORE_DEREF", "DELETE_DEREF"):
            if ins.argval in code.co_freevars:
                derefs.add(ins.argval)
    if chain:
        chains[tuple(chain)] = None
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _reference(const, names, chains, stores, derefs, top=False)


def _both(code):
    ref = ({}, {}, set(), set())
    _reference(code, *ref)
    ours = ({}, {}, set(), set())
    _code._scan(code, *ours, top=True)
    return ours, ref


def _codes(obj, seen):
    code = getattr(obj, "__code__", None)
    if isinstance(code, types.CodeType) and id(code) not in seen:
        seen.add(id(code))
        yield code
    if isinstance(obj, type):
        for v in vars(obj).values():
            yield from _codes(getattr(v, "__func__", v), seen)


@pytest.mark.parametrize(
    "module",
    [
        "json.decoder",
        "argparse",
        "dataclasses",
        "inspect",
        "jax._src.pjit",
        "stablejit._fingerprint.classify",
    ],
)
def test_scan_agrees_with_dis_on_real_modules(module):
    mod = importlib.import_module(module)
    seen: set[int] = set()
    codes = [c for v in vars(mod).values() for c in _codes(v, seen)]
    assert len(codes) > 5
    for code in codes:
        ours, ref = _both(code)
        assert ours == ref, code.co_qualname if hasattr(code, "co_qualname") else code.co_name


def test_scan_agrees_with_dis_on_extended_arguments_and_writes():
    # 300 globals push name indices past one byte (EXTENDED_ARG).
    reads = " + ".join(f"g{i}" for i in range(300))
    src = f"""
def outer():
    x = 0
    def inner():
        nonlocal x
        global G
        G = x = {reads} + cfg.a.b + mod.fn().c
        del G
        return [y.attr for y in lst]
    return inner
"""
    ns: dict = {}
    exec(src, ns)
    inner = ns["outer"]()
    ours, ref = _both(inner.__code__)
    assert ours == ref
    names, chains, stores, derefs = ours
    assert {"g0", "g299", "cfg", "mod", "lst"} <= set(names)
    assert ("cfg", "a", "b") in chains and ("mod", "fn") in chains
    assert stores == {"G"} and derefs == {"x"}
