"""Models in closures: static pytree nodes (flax nnx's GraphDef), and keys that cannot be built.

A closure over a model holds what the model is made of. A static pytree node (one registered
with ``jax.tree_util.register_static``, as flax keeps an nnx ``GraphDef``) is its own auxiliary
data: it is keyed by value, as JAX compares it, and re-checked by identity on the fast path. A
key that cannot be built (a structure deeper than Python's recursion limit) is refused once per
code, with a true message, and ``describe`` says so instead of raising.
"""

from __future__ import annotations

import dataclasses
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import count_trace

import stablejit
from stablejit import stable_jit


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Shape:
    """A static node: hashable, compared by value."""

    scale: float
    name: str


def _scaled(shape):
    def f(x):
        count_trace()
        return x * shape.scale

    return stable_jit(f)


def test_a_static_pytree_node_is_keyed_by_value(traced):
    x = jnp.arange(3.0)
    for _ in range(4):
        np.testing.assert_allclose(_scaled(Shape(2.0, "a"))(x), x * 2)  # equal, another object
    assert traced() == 1
    np.testing.assert_allclose(_scaled(Shape(3.0, "a"))(x), x * 3)
    np.testing.assert_allclose(_scaled(Shape(2.0, "b"))(x), x * 2)
    assert traced() == 3


def test_a_static_node_held_again_is_served_without_a_walk(monkeypatch, traced):
    from stablejit._runtime import calls

    shape = Shape(2.0, "a")
    x = jnp.arange(3.0)
    for _ in range(6):
        np.testing.assert_allclose(_scaled(shape)(x), x * 2)
    walks = []
    real = calls.call_key
    monkeypatch.setattr(calls, "call_key", lambda *a, **k: walks.append(1) or real(*a, **k))
    for _ in range(3):
        np.testing.assert_allclose(_scaled(shape)(x), x * 2)
    assert (walks, traced()) == ([], 1)


def test_an_nnx_split_merge_closure_traces_once():
    nnx = pytest.importorskip("flax.nnx")
    graphdef, state = nnx.split(nnx.Linear(4, 3, rngs=nnx.Rngs(0)))
    traces = []

    def forward(state, x):
        def f(state, x):
            traces.append(1)
            return nnx.merge(graphdef, state)(x)

        return stable_jit(f)(state, x)

    x = jnp.ones((2, 4))
    want = nnx.merge(graphdef, state)(x)
    for _ in range(4):
        np.testing.assert_allclose(forward(state, x), want, rtol=1e-6)
    assert len(traces) == 1
    assert "cannot be built" not in str(stablejit.describe(forward))


def _deep(depth):
    out = []
    for _ in range(depth):
        out = [out]
    return out


def _over_deep(nested):
    def f(x):
        count_trace()
        return x + (1 if nested else 0)

    return f


def test_a_function_that_cannot_be_keyed_is_refused_once_per_code(monkeypatch, caplog, traced):
    from stablejit._runtime import keys

    nested = _deep(100_000)  # deeper than any recursion limit
    walks = []
    real = keys.KeyWalker
    monkeypatch.setattr(keys, "KeyWalker", lambda *a: walks.append(1) or real(*a))
    x = jnp.arange(3.0)
    with caplog.at_level(logging.WARNING, logger="stablejit"):
        for _ in range(3):
            f = _over_deep(nested)
            np.testing.assert_allclose(stable_jit(f)(x), x + 1)
    assert len(walks) == 1  # the walk that failed, then none
    assert traced() == 3  # as jax.jit: one trace per function object
    [message] = [r.getMessage() for r in caplog.records if "cannot be keyed" in r.getMessage()]
    assert "traced once per function object" in message and "anew each time" not in message


def test_describe_says_a_key_cannot_be_built_instead_of_raising():
    # A set is described by its key (no parts of its own): the walk of that key is what fails.
    nested = ()
    for _ in range(100_000):
        nested = (nested,)
    text = str(stablejit.describe(_over_deep(frozenset({nested}))))
    assert "its key cannot be built" in text
