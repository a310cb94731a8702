"""Differential fuzzing: random closure programs through stable_jit versus eager.

Each example builds a program of nested closures, a lambda, a default, a
global, a ``functools.partial``, a bound method and two loops (``stablejit``'s
``fori_loop`` and ``scan`` under test, ``lax``'s in the eager reference), all reading random values
(arrays of many dtypes and shapes, PRNG keys, Python scalars including -0.0,
NaN and big ints, strings, tuples, lists, dicts, NamedTuples, dataclass
pytrees) from a fresh module namespace. It then calls it many times, changing
things between calls — rebinding globals, cells, defaults and attributes,
mutating lists, dicts and numpy arrays in place, swapping array values and
shapes, redefining the whole closure — and checks every result against eager
evaluation of the same function, and the number of traces against the number
of distinct static configurations seen.

Two more families live in their own modules: programs that reach user classes
and change class-level state between calls (``_fuzz_classes.py``: class
attributes, methods replaced on a class or a base, globals that properties read,
class-level containers mutated in place, attributes that shadow), and programs
over equinox and flax nnx modules whose fields, static fields and layers change
(``_fuzz_modules.py``; skipped where the library is not installed). The values
every family draws, and what a trace depends on in them, are in ``_fuzz_values.py``.

    pytest tests/test_fuzz.py                            # CI profile, ~2 minutes
    STABLEJIT_FUZZ=long pytest tests/test_fuzz.py -q -s  # long profile; writes
                                                         # tests/results/fuzz-long-all.json
    (or one part per process: -k random, -k fast, -k "fast and nested", -k class,
    -k "equinox or nnx", with STABLEJIT_FUZZ_PART set)
"""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _fuzz_classes import ClassProgram
from _fuzz_modules import EqxProgram, NnxProgram
from _fuzz_values import P, Pair, config, mutate, set_cell, values
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from jax import lax

import stablejit
from stablejit import stable_jit

PROFILE = os.environ.get("STABLEJIT_FUZZ", "ci")
settings.register_profile(
    "ci", max_examples=20, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.register_profile(
    "long",
    max_examples=int(os.environ.get("STABLEJIT_FUZZ_EXAMPLES", "500")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
STEPS = st.integers(4, 12) if PROFILE == "ci" else st.integers(60, 140)
# The long profile runs more calls between changes: hits are where a stale
# result would show, and they are cheap, where every change may compile.
EXTRA_CALLS = 0 if PROFILE == "ci" else 4
# The class and model families compile on most changes and their programs call more
# Python per call: fewer of them in the CI profile keep the whole file near two minutes.
# Nor does the CI profile shrink their failures (each try compiles anew: minutes); the
# message names the step and the change, and the long profile shrinks.
FAMILIES = settings.get_profile(PROFILE)
if PROFILE == "ci":
    FAMILIES = settings(FAMILIES, max_examples=6, phases=[Phase.explicit, Phase.generate])

TOTALS = {"programs": 0, "calls": 0, "traces": 0, "mismatches": 0, "trace_counts_off": 0}


# ---------------------------------------------------------------- the program

SOURCE = """
def g2(y, b):
    return y * 0.5 + P(b)


class Holder:
    def __init__(self, v):
        self.v = v

    def method(self, y):
        return y + 7.0 * P(self.v)


def make(c0, c1, c2, holder):
    inner = lambda y: y + 2.0 * P(c1)

    def f(x, d0=c2):
        if isinstance(x, jax.core.Tracer):
            T.append(1)
        acc = x + P(G0)
        acc = acc + 3.0 * P(c0)
        acc = inner(acc)
        acc = acc + 5.0 * P(d0)
        acc = holder.method(acc)
        acc = FORI(0, 2, lambda i, a: a + P(c0) * i, acc)
        acc = SCAN(lambda c, _: (c + 0.25 * P(c1), None), acc, None, length=2)[0]
        return PART(acc)

    return f
"""

NAMES = ["G0", "b", "c0", "c1", "c2", "v"]

# A function whose every global and cell holds a number, an array or a module:
# what stablejit re-checks by identity instead of walking (its fast path).
SOURCE_FAST = """
def make(c0):
    def f(x):
        if isinstance(x, jax.core.Tracer):
            T.append(1)
        return x * G0 + c0 + jnp.copysign(1.0, c0)

    return f
"""
NAMES_FAST = ["G0", "c0"]

# The same over closures of closures, tuples and NamedTuples of them, and a
# function held twice (optax's optimisers): re-checked by the same fast path.
SOURCE_NESTED = """
def make(c0, c1):
    def inner(y):
        return y * c1 + G0

    ops = (Pair(inner, jnp.tanh), 2)

    def f(x):
        if isinstance(x, jax.core.Tracer):
            T.append(1)
        (a, act), k = ops
        return act(a(x)) * G0 + c0 + jnp.copysign(1.0, c0) + inner(x) * k

    return f
"""
NAMES_NESTED = ["G0", "c0", "c1"]

# Defaults computed at each definition (a new tuple and dict each time):
# re-checked atom by atom by the same fast path; rebound in place as well.
SOURCE_DEFAULTS = """
def make(c0, c1):
    def f(x, k=c1, *, s=c0):
        if isinstance(x, jax.core.Tracer):
            T.append(1)
        return x * G0 + P(k) + jnp.copysign(1.0, s) + s

    return f
"""
NAMES_DEFAULTS = ["G0", "c0", "c1"]

# Containers and plain objects (a params dict, a list of logits processors),
# which the fast path re-checks item by item, in bulk, or compiled: ``c1`` is
# an attribute of an object the closure holds in a list, rebound in place.
SOURCE_CONTAINERS = """
class Obj:
    def __init__(self, v):
        self.v = v
        self.tag = "t"


def make(c0, c1):
    box = Obj(c1)
    objs = [box, Obj(2.5)]
    cfg = {"scale": 2.0, "parts": (1, [3, "s"], {"k": -0.0})}

    def f(x):
        if isinstance(x, jax.core.Tracer):
            T.append(1)
        acc = x * P(G0) + P(c0) + cfg["scale"] * P(cfg["parts"])
        for i, o in enumerate(objs):
            acc = acc + (i + 1) * P(o.v) + len(o.tag)
        return acc

    return f
"""
NAMES_CONTAINERS = ["G0", "c0", "c1"]
numbers = st.one_of(
    st.sampled_from([0, 1, 3, -5, True, False]),
    st.sampled_from([0.5, 1.5, 0.0, -0.0, math.nan, 2.25]),
    st.sampled_from([0.5, 1.5, 0.0, -0.0]).map(lambda v: float(f"{v}")),  # equal, new objects
    st.sampled_from([(), (1,)]).map(lambda s: np.full(s, 2.0, np.float32)),
    st.sampled_from([(), (1,)]).map(lambda s: jnp.full(s, 3, jnp.int32)),
)


class Program:
    """One generated program, its current values, and the function under test."""

    def __init__(
        self, vals: dict, source=SOURCE, names=NAMES, lift=False, new_values=values
    ) -> None:
        self.ns: dict = {"P": P, "Pair": Pair, "jax": jax, "jnp": jnp, "T": []}
        self.ns["__name__"] = "fuzz_program"
        exec(compile(source, "<fuzz program>", "exec"), self.ns)
        self.fast = source is not SOURCE
        self.objects = source is SOURCE_CONTAINERS
        self.defaults = source is SOURCE_DEFAULTS
        self.names = names
        self.lift = lift  # stable_jit's lift_scalars
        self.new_values = new_values
        self.exact = True  # every trace is one configuration of configuration()
        self.vals = dict(vals)
        self.ns["G0"] = vals["G0"]
        if not self.fast:
            self.holder = self.ns["Holder"](vals["v"])
            self.ns["PART"] = functools.partial(self.ns["g2"], b=vals["b"])
        self.remake()

    def remake(self):
        v = self.vals
        if self.fast:
            self.f = self.ns["make"](*(v[n] for n in self.names[1:]))
        else:
            self.f = self.ns["make"](v["c0"], v["c1"], v["c2"], self.holder)

    ACTIONS = ("call", "rebind", "in place", "redefine")
    INPUTS = [(2,), (2, 3)]

    def change(self, action: str, data) -> str:
        """Makes the change ``action`` names to a drawn value; says what it changed."""
        name = data.draw(st.sampled_from(self.names))
        if action == "rebind":
            self.rebind(name, data.draw(self.new_values))
        elif action == "in place":
            mutate(self.vals[name], data)
        elif action == "redefine":
            self.remake()
        return f"{action} of {name}"

    def rebind(self, name: str, value) -> None:
        """Changes ``name`` on the live objects, without redefining ``f``."""
        self.vals[name] = value
        if name == "G0":
            self.ns["G0"] = value
        elif name == "b":
            self.ns["PART"] = functools.partial(self.ns["g2"], b=value)
        elif name == "v":
            self.holder.v = value
        elif name == "c2" or (self.defaults and name == "c1"):
            self.f.__defaults__ = (value,)
        elif self.defaults and name == "c0":
            self.f.__kwdefaults__ = {"s": value}
        elif name == "c1" and self.objects:
            _cell(self.f, "objs")[0].v = value  # the object's state, in place
        else:
            set_cell(self.f, name, value)

    def configuration(self, x) -> tuple:
        def of(v):  # lift_scalars=True passes floats in, keyed by type alone
            return ("lifted", type(v)) if self.lift and type(v) is float else config(v)

        return (config(x), *(of(self.vals[n]) for n in self.names))


def _cell(fn, name):
    return fn.__closure__[fn.__code__.co_freevars.index(name)].cell_contents


def _check(got, want, where: str) -> None:
    try:
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=1e-5)
    except AssertionError:
        TOTALS["mismatches"] += 1
        raise AssertionError(f"stale or wrong result {where}") from None


def _write_totals() -> None:
    # Written after every program, so a long run that is stopped still reports
    # what it checked.
    if PROFILE == "long":
        shard = os.environ.get("STABLEJIT_FUZZ_PART", "all")
        out = Path(__file__).resolve().parent / "results" / f"fuzz-long-{shard}.json"
        out.parent.mkdir(exist_ok=True)
        out.write_text(json.dumps({"profile": PROFILE, "part": shard, **TOTALS}, indent=2) + "\n")


@pytest.fixture(autouse=True, scope="module")
def _report():
    yield
    print(f"\nfuzz ({PROFILE}): {TOTALS}")
    _write_totals()


@settings.get_profile(PROFILE)
@given(
    vals=st.fixed_dictionaries({n: values for n in NAMES}),
    steps=STEPS,
    data=st.data(),
)
def test_random_closure_programs_match_eager_and_trace_once_per_configuration(vals, steps, data):
    _run(Program(vals), steps, data)


# Programs whose every value the fast path re-checks: flat, nested (closures
# of closures in tuples), nested under lift_scalars=True, and in defaults.
FAST_PROGRAMS = {
    "plain": (SOURCE_FAST, NAMES_FAST, False),
    "nested": (SOURCE_NESTED, NAMES_NESTED, False),
    "lifted": (SOURCE_NESTED, NAMES_NESTED, True),
    "defaults": (SOURCE_DEFAULTS, NAMES_DEFAULTS, False),
}


@settings.get_profile(PROFILE)
@given(
    vals=st.fixed_dictionaries({n: values for n in NAMES_CONTAINERS}),
    steps=STEPS,
    data=st.data(),
)
def test_container_and_object_programs_match_eager_and_trace_once_per_configuration(
    record_checks, vals, steps, data
):
    _run(Program(vals, SOURCE_CONTAINERS, NAMES_CONTAINERS), steps, data)


@pytest.mark.parametrize("program", list(FAST_PROGRAMS))
@settings.get_profile(PROFILE)
@given(steps=STEPS, data=st.data())
def test_fast_path_programs_match_eager_and_trace_once_per_configuration(program, steps, data):
    source, names, lift = FAST_PROGRAMS[program]
    vals = data.draw(st.fixed_dictionaries({n: numbers for n in names}))
    _run(Program(vals, source, names, lift, numbers), steps, data)


@FAMILIES
@given(steps=STEPS, data=st.data())
def test_class_programs_match_eager_when_class_level_state_changes(steps, data):
    _run(ClassProgram(data), steps, data)


@FAMILIES
@given(steps=STEPS, data=st.data())
def test_equinox_module_programs_match_eager_and_trace_once_per_structure(steps, data):
    eqx = pytest.importorskip("equinox")
    _run(EqxProgram(eqx, data), steps, data)


@FAMILIES
@given(steps=STEPS, data=st.data())
def test_nnx_module_programs_match_eager_and_trace_once_per_structure(steps, data):
    nnx = pytest.importorskip("flax.nnx")
    _run(NnxProgram(nnx, data), steps, data)


def _run(prog, steps: int, data) -> None:
    """Calls ``prog.f`` ``steps`` times through stable_jit and eagerly, making one of
    ``prog.ACTIONS`` before each call, and checks every result and the traces."""
    stablejit.clear_cache()
    seen: set = set()
    TOTALS["programs"] += 1
    for step in range(steps):
        action = data.draw(st.sampled_from(prog.ACTIONS + ("call",) * EXTRA_CALLS))
        what = "call" if action == "call" else prog.change(action, data)
        shape = data.draw(st.sampled_from(prog.INPUTS))
        x = jnp.asarray(np.arange(math.prod(shape), dtype=np.float32).reshape(shape))
        prog.ns.update(FORI=lax.fori_loop, SCAN=lax.scan)
        with jax.disable_jit():  # lax's loops as Python loops: no compile per call
            want = prog.f(x)  # eager, with the program as it is now
        prog.ns.update(FORI=stablejit.fori_loop, SCAN=stablejit.scan)
        got = stable_jit(prog.f, lift_scalars=prog.lift)(x)
        TOTALS["calls"] += 1
        _check(got, want, f"at step {step} after {what}")
        seen.add(prog.configuration(x))
    traces = len(prog.ns["T"])
    TOTALS["traces"] += traces
    # Not exact where what a key must tell apart is finer than it needs to be.
    fits = traces == len(seen) if prog.exact else traces <= len(seen)
    TOTALS["trace_counts_off"] += not fits  # (a long run stopped at its time limit says so)
    _write_totals()
    assert fits, f"{traces} traces for {len(seen)} static configurations"
