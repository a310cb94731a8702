"""The three forms of a record's checks, given one function: they must agree.

A record (stablejit's ``_fingerprint/records.py``) is checked interpreted (each guard's
``fits``), as generated Python (its compiled ``match``, and the call function's lines alone)
and, where the accelerator is built, in C (the call function's ``check``). :func:`differential`
gives a record the function that built it with its children changed at random — the very
values, equal values that are other objects, changed values, changed types — and requires every
form to say the same: hit or miss, and on a hit the key, the arrays taken and the objects
numbered, in order. conftest runs it on every record the suite builds.
"""

from __future__ import annotations

import copy
import random
import types
from typing import NamedTuple

import numpy as np

from stablejit import _native as native
from stablejit._fingerprint import sinks as sinks_module
from stablejit._fingerprint.codegen import compile_match
from stablejit._runtime import hot
from stablejit._runtime.checks import call_checks

MUTATIONS = 6
"""Changed functions given to each record."""


class Disagreement(AssertionError):
    """Two forms of one record's checks said different things of one function."""


def _interpreted(record, fn, sinks):
    seen = {id(fn): 0}
    leaves = []
    key = record.interpret(fn, leaves, sinks, seen)
    return None if key is None else (key, leaves, list(seen))


def _compiled(match):
    def run(record, fn, sinks):
        seen = {id(fn): 0}
        leaves = []
        key = match(fn, leaves, sinks, seen)
        return None if key is None else (key, leaves, list(seen))

    return run


def _call(call):
    def run(record, fn, sinks):
        return call_checks(record, call, fn)

    return run


def _unused(*args, **kwargs):
    raise AssertionError("a record's checks alone call nothing")


def forms(record, code):
    """``{name: run(record, fn, sinks)}`` for each form ``record`` has here."""
    out = {
        "interpreted": _interpreted,
        "compiled match": _compiled(compile_match(record)),
        "generated call": _call(hot._compiled(record, code, _unused, _unused)),
    }
    if native.NATIVE is not None:
        call = hot._native(record, code, _unused, _unused)
        if call is not None:
            out["native call"] = _call(call)
    return out


def _said(result):
    """What a form said, comparable across forms (arrays and objects by identity)."""
    if result is None:
        return None
    key, leaves, numbering = result
    return (id(key), [id(x) for x in leaves], list(numbering))


def agree(record, code, fn, made=None) -> dict:
    """Runs every form of ``record`` on ``fn``; raises :class:`Disagreement`
    unless they all say the same. Returns what they said, by form."""
    made = made or forms(record, code)
    sinks = sinks_module.SINKS
    said = {name: run(record, fn, sinks) for name, run in made.items()}
    first = _said(said["interpreted"])
    for name, result in said.items():
        if _said(result) != first:
            raise Disagreement(
                f"{getattr(fn, '__qualname__', fn)}: {name} says {_describe(result)}, "
                f"interpreted says {_describe(said['interpreted'])}"
            )
    return said


def _describe(result) -> str:
    if result is None:
        return "miss"
    _, leaves, numbering = result
    return f"hit with {len(leaves)} arrays, {len(numbering)} numbered"


# --- changing a function's children -----------------------------------------------------------


def changed(fn, rng: random.Random):
    """``fn`` again (its code, globals and defaults) over cells whose values
    are changed at random, or None if it has no cells."""
    closure = fn.__closure__
    if not closure:
        return None
    cells = []
    for cell in closure:
        try:
            v = cell.cell_contents
        except ValueError:
            cells.append(types.CellType())
            continue
        cells.append(types.CellType(_change(v, rng, 0)))
    g = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, tuple(cells))
    g.__kwdefaults__ = fn.__kwdefaults__
    return g


def _change(v, rng: random.Random, depth: int):
    way = rng.choice(("same", "same", "equal", "value", "type"))
    try:
        if way == "same" or depth > 3:
            return v
        if way == "equal":
            return _equal(v, rng, depth)
        if way == "value":
            return _other_value(v, rng, depth)
        return _other_type(v)
    except Exception:  # noqa: BLE001 - an object that will not be copied: the very one
        return v


def _equal(v, rng, depth):
    """A value with ``v``'s key that is another object where it can be."""
    t = type(v)
    if t is float:
        return float(repr(v))
    if t is str:
        return "".join(list(v)) if v else v
    if t is list:
        return [_equal(x, rng, depth + 1) for x in v]
    if t is dict:
        return {
            ("".join(list(k)) if type(k) is str else k): _equal(x, rng, depth + 1)
            for k, x in v.items()
        }
    if isinstance(v, tuple):
        items = [_equal(x, rng, depth + 1) for x in v]
        return t._make(items) if hasattr(t, "_make") else t(items)
    if t is types.FunctionType:
        return changed(v, rng) or v
    if hasattr(v, "shape") and hasattr(v, "dtype") and not np.isscalar(v):
        return np.zeros(np.shape(v), np.asarray(v).dtype if t is np.ndarray else np.float32)
    if hasattr(v, "__dict__") and not isinstance(v, type) and t.__module__ != "builtins":
        other = copy.copy(v)
        other.__dict__.update({k: _equal(x, rng, depth + 1) for k, x in vars(v).items()})
        return other
    return v


def _other_value(v, rng, depth):
    """A value of ``v``'s type with another key where it can be."""
    t = type(v)
    if t is bool:
        return not v
    if t is int:
        return v + 1
    if t is float:
        return -v if rng.random() < 0.5 else v + 0.5  # (-0.0 is not 0.0)
    if t is complex:
        return v + 1j
    if t is str:
        return v + "x"
    if t is list:
        return v[:-1] if v and rng.random() < 0.5 else [*v, 0]
    if t is dict:
        if v and rng.random() < 0.5:  # a key renamed, the size kept
            first = next(iter(v))
            return {(f"{k}_" if k is first else k): x for k, x in v.items()}
        return {**v, "added": 1}
    if isinstance(v, tuple) and v:
        items = list(v)
        i = rng.randrange(len(items))
        items[i] = _change(items[i], rng, depth + 1)
        return t._make(items) if hasattr(t, "_make") else t(items)
    if t is types.FunctionType:
        return lambda *a: None
    if hasattr(v, "__dict__") and not isinstance(v, type) and t.__module__ != "builtins":
        other = copy.copy(v)
        other.__dict__["added"] = 1
        return other
    return _other_type(v)


class _Pair(NamedTuple):
    a: object
    b: object


def _other_type(v):
    """A value of another type (an int a float, a list a tuple, ...)."""
    t = type(v)
    if t is int or t is bool:
        return float(v)
    if t is float:
        return int(v) if v == v and abs(v) < 1e300 else 0
    if t is list:
        return tuple(v)
    if t is tuple:
        return list(v)
    if t is dict:
        return list(v.values())
    if isinstance(v, tuple):
        return _Pair(v, None)
    if t is np.ndarray or hasattr(v, "shape"):
        return 1.0
    return None if v is not None else 0


RUNS = [0]
"""How many records :func:`differential` was given (so that a test can tell it ran)."""


def differential(record, fn, seed: int) -> None:
    """Gives ``record`` the function ``fn`` that built it, then
    :data:`MUTATIONS` changes of it; raises :class:`Disagreement` where
    its forms do not all say the same."""
    RUNS[0] += 1
    made = forms(record, fn.__code__)
    agree(record, fn.__code__, fn, made)
    rng = random.Random(seed)
    for _ in range(MUTATIONS):
        g = changed(fn, rng)
        if g is None:
            return
        agree(record, fn.__code__, g, made)
