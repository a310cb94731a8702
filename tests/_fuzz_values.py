"""The values the differential fuzzer's programs read, and what a trace may depend on in them.

``values`` draws what a program closes over (arrays of many dtypes and shapes, PRNG keys,
Python scalars including -0.0, NaN and big ints, strings, containers, NamedTuples, dataclass
pytrees); ``P`` folds a value into one number that every part a trace could bake in changes,
so a stale result shows; ``config`` is the static configuration of a value, what a correct
key changes with, so the fuzzer can count the traces it should see. Shared by every program
family (test_fuzz.py, _fuzz_classes.py, _fuzz_modules.py).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

import stablejit


class Pair(NamedTuple):
    a: Any
    b: Any


@dataclasses.dataclass
class Box:
    w: Any
    tag: str


jax.tree_util.register_dataclass(Box, data_fields=["w"], meta_fields=["tag"])


# ---------------------------------------------------------------- values

DTYPES = ["float32", "int32", "int8", "bool", "complex64", "bfloat16"]
SHAPES = [(), (2,), (3,), (2, 3)]


@st.composite
def arrays(draw):
    shape = draw(st.sampled_from(SHAPES))
    dtype = draw(st.sampled_from(DTYPES))
    values = np.asarray(draw(st.integers(0, 3)) + np.arange(math.prod(shape)) % 3)
    a = values.reshape(shape).astype(jnp.dtype(dtype))
    return a if draw(st.booleans()) else jnp.asarray(a)


keys = st.integers(0, 2**16).map(jax.random.key)
scalars = st.one_of(
    st.sampled_from([0, 1, 3, 2**70, -5]),
    st.booleans(),
    st.sampled_from([0.5, 1.5, 0.0, -0.0, math.nan, 2.25]),
    st.sampled_from([1 + 2j, -1j]),
    st.sampled_from(["a", "bb", ""]),
)
leaves = st.one_of(arrays(), scalars, keys)
values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.tuples(inner, inner),
        st.lists(inner, min_size=1, max_size=3),
        st.dictionaries(st.sampled_from(["x", "y", "z"]), inner, min_size=1, max_size=3),
        st.builds(Pair, inner, inner),
        st.builds(Box, arrays(), st.sampled_from(["x", "y"])),
    ),
    max_leaves=4,
)


def P(v) -> Any:
    """A number that depends on every part of ``v`` a trace could bake in."""
    if isinstance(v, (jax.Array, np.ndarray)):
        if jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key):
            return jax.random.uniform(v)
        # (|re| + 2|im|, not abs(): jax 0.10.2's XLA aborts on abs of a complex
        # constant it folds to an iota, such as a closed-over numpy [0, 1].)
        c = jnp.asarray(v).astype(jnp.complex64)
        return (jnp.abs(c.real) + 2 * jnp.abs(c.imag)).sum() / (1 + v.size)
    if isinstance(v, bool):
        return 1.0 if v else 2.0
    if isinstance(v, int):
        return float(v % 97)
    if isinstance(v, float):
        return math.copysign(0.5, v) if v == 0 else v
    if isinstance(v, complex):
        return v.real + 2 * v.imag
    if isinstance(v, str):
        return float(len(v) + (ord(v[0]) % 7 if v else 0))
    if isinstance(v, Box):
        return P(v.w) + (1.0 if v.tag == "x" else 3.0)
    if isinstance(v, Pair):
        return P(v.a) + 2 * P(v.b)
    if isinstance(v, dict):
        return sum((i + 1) * P(x) for i, x in enumerate(v.values())) + sum(map(len, v))
    return sum((i + 1) * P(x) for i, x in enumerate(v)) + 0.5 * len(v) + isinstance(v, list)


def config(v) -> Any:
    """The static configuration of ``v``: what a trace depends on, arrays by shape and dtype
    (small NumPy arrays, constants, by contents too)."""
    if type(v) is np.ndarray and v.nbytes <= stablejit.config.numpy_constant_bytes:
        return ("constant", v.shape, str(v.dtype), v.tobytes())
    if isinstance(v, (jax.Array, np.ndarray)):
        return ("array", v.shape, str(v.dtype))
    if isinstance(v, float):
        return (float, v.hex())
    if isinstance(v, (bool, int, complex, str)):
        return (type(v), v)
    if isinstance(v, Box):
        return (Box, v.tag, config(v.w))
    if isinstance(v, dict):
        return (dict, tuple((k, config(x)) for k, x in v.items()))
    return (type(v), tuple(config(x) for x in v))


def mutate(v, data) -> bool:
    """Mutates ``v`` in place, if it can be (a numeric NumPy array, a list, a dict); True if it did."""
    if isinstance(v, np.ndarray) and v.size and v.dtype.kind in "iuf":
        v[...] = (v + 1) % 4
        return True
    if isinstance(v, list):
        v.append(data.draw(leaves)) if len(v) < 4 else v.pop()
        return True
    if isinstance(v, dict):
        k = data.draw(st.sampled_from(["x", "y", "w"]))
        v[k] = data.draw(leaves)
        return True
    return False


def set_cell(fn, name, value) -> None:
    """Rebinds the closure variable ``name`` of ``fn`` and of the closures it closes over."""
    for var, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
        if var == name:
            cell.cell_contents = value
        elif callable(cell.cell_contents) and hasattr(cell.cell_contents, "__code__"):
            set_cell(cell.cell_contents, name, value)
