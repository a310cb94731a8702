"""Differential: random nests of the loop wrappers inside random transformations.

Each nest runs as stock ``jax.lax``, through the wrappers directly, and as stock code under
``stablejit.patch()``: equal results (or lax's exception, word for word) and, staged by
``make_jaxpr``, equal jaxprs. Seeded and small, so it runs in seconds on two cores.
"""

import random
import re

import _transforms
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import stablejit

W = jnp.array([0.5, -1.0, 2.0])
X = jnp.array([0.3, -0.2, 0.7])


def _leaf(y):
    return jnp.sin(y) * W + 0.1


# Each layer wraps ``g`` (array of X's shape -> same) in one loop, through ``m`` (lax or stablejit).
LAYERS = {
    "while": lambda m, g: (
        lambda x: m.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, g(c[1])), (0, x))[1]
    ),
    "while_closure": lambda m, g: (
        lambda x: m.while_loop(lambda c: c[0] < 2, lambda c: (c[0] + 1, g(c[1] * x)), (0, W))[1]
    ),
    "fori": lambda m, g: lambda x: m.fori_loop(0, 2, lambda i, c: g(c) * 0.5 + i, x),
    "fori_dynamic": lambda m, g: (
        lambda x: m.fori_loop(jnp.int32(0), jnp.int32(2), lambda i, c: g(c) - 1.0, x)
    ),
    "scan": lambda m, g: (
        lambda x: m.scan(lambda c, e: (g(c) * e, c.sum()), x, jnp.array([1.0, 0.5]))[0]
    ),
    "scan_read_only_carry": lambda m, g: (
        lambda x: m.scan(lambda c, _: ((c[0], g(c[1]) + c[0]), None), (W, x), None, length=2)[0][1]
    ),
    "cond": lambda m, g: lambda x: m.cond(x.sum() > 0, g, lambda y: y * W, x),
    "cond_forwarding": lambda m, g: (
        lambda x: sum(m.cond(x[0] > 0, lambda a, b: (g(a), b), lambda a, b: (a, b), x, x))
    ),
    "cond_legacy": lambda m, g: lambda x: m.cond(x[1] > 0, x, g, x, jnp.cos),
    "switch": lambda m, g: (
        lambda x: m.switch(jnp.int32(x[0] > 0) + 1, [jnp.sin, g, lambda y: y - W], x)
    ),
    "map": lambda m, g: lambda x: m.map(g, jnp.stack([x, x * 2]))[1],
}

TRANSFORMS = {"top": lambda f: f, **_transforms.TRANSFORMS, **_transforms.NESTED}


def _cases(n=40, seed=36):
    rng = random.Random(seed)
    return [
        (
            tuple(rng.choice(sorted(LAYERS)) for _ in range(rng.randint(1, 3))),
            rng.choice(sorted(TRANSFORMS)),
        )
        for _ in range(n)
    ]


CASES = _cases()


def _nest(m, layers):
    f = _leaf
    for name in reversed(layers):
        f = LAYERS[name](m, f)
    return f


def _outcome(run):
    try:
        return ("ok", run())
    except Exception as e:  # noqa: BLE001 - any exception, compared with stock's
        return ("raises", type(e), re.sub(r"0x[0-9a-f]+", "0x…", str(e)))


def _three_ways(make):
    stock = _outcome(lambda: make(lax))
    direct = _outcome(lambda: make(stablejit))
    with stablejit.patch():
        patched = _outcome(lambda: make(lax))
    return stock, direct, patched


@pytest.mark.parametrize(
    "layers, transform", CASES, ids=[">".join(names) + "@" + t for names, t in CASES]
)
def test_random_nest_equals_stock(layers, transform):
    def values(m):
        return np.asarray(TRANSFORMS[transform](_nest(m, layers))(X))

    def jaxpr(m):
        return str(jax.make_jaxpr(TRANSFORMS[transform](_nest(m, layers)))(X))

    stock, direct, patched = _three_ways(values)
    for got in (direct, patched):
        assert got[0] == stock[0], (got, stock)
        if got[0] == "ok":
            np.testing.assert_allclose(got[1], stock[1], rtol=1e-5, atol=1e-6)
        else:
            assert got == stock
    stock, direct, patched = _three_ways(jaxpr)
    assert direct == stock
    assert patched == stock
