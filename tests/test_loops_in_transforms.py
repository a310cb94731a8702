"""Loops inside a transformation are exactly jax.lax's: same jaxpr, same rules, same errors.

Each program runs three ways: stock (``jax.lax``), the wrappers called directly (``stablejit``)
and stock code under ``stablejit.patch()``. The outer transformations are JAX's own, captured
before any patching, so only the loops differ.
"""

import re

import _transforms
import jax
import jax.numpy as jnp
import numpy as np
import pytest

# The outer transformations: stock, whatever patch() does to jax.jit and lax's loops.
from _transforms import COND, JIT, SCAN
from jax import lax
from jax.sharding import PartitionSpec as P

import stablejit
from stablejit._route import EAGER, STAGING, TOP, enclosing, may_cache

W = jnp.array([0.5, -1.0, 2.0])  # closed over by every loop body: a constant of the jaxpr
X = jnp.array([0.3, -0.2, 0.7])


def _shard_map(f):
    mesh = jax.make_mesh((1,), ("d",))
    return jax.shard_map(f, mesh=mesh, in_specs=P(), out_specs=P())


# --- the one decision: where are we, and may we cache? ------------------------------------------

# Each wraps ``f`` (x -> array of X's shape) in one transformation and calls it on X.
CONTEXTS = {
    "top": lambda f: f(X),
    "jit": lambda f: JIT(f)(X),
    "make_jaxpr": lambda f: jax.make_jaxpr(f)(X),
    "vmap": lambda f: jax.vmap(f)(jnp.stack([X, X])),
    "grad": lambda f: jax.grad(lambda x: f(x).sum())(X),
    "jvp": lambda f: jax.jvp(f, (X,), (X,)),
    "linearize": lambda f: jax.linearize(f, X),
    "scan body": lambda f: SCAN(lambda c, _: (f(c), None), X, None, length=1),
    "cond branch": lambda f: COND(True, f, f, X),
    "shard_map": lambda f: _shard_map(f)(X),
    "checkpoint": lambda f: jax.checkpoint(f)(X),
    "jit of vmap": lambda f: JIT(jax.vmap(f))(jnp.stack([X, X])),
    "vmap of jit": lambda f: jax.vmap(JIT(f))(jnp.stack([X, X])),
    "grad of vmap": lambda f: jax.grad(lambda x: jax.vmap(f)(x).sum())(jnp.stack([X, X])),
    "compile-time eval in jit": lambda f: JIT(lambda x: _eval_inside(f, x))(X),
    "custom_vmap rule": lambda f: jax.vmap(_with_vmap_rule(f))(jnp.stack([X, X])),
    "custom_vmap rule, named axis": lambda f: jax.vmap(_with_vmap_rule(f), axis_name="i")(
        jnp.stack([X, X])
    ),
}
WHERE = {
    "top": TOP,
    "jit": STAGING,
    "make_jaxpr": STAGING,
    "vmap": EAGER,
    "grad": EAGER,
    "jvp": EAGER,
    "linearize": EAGER,
    "scan body": STAGING,
    "cond branch": STAGING,
    "shard_map": EAGER,
    "checkpoint": STAGING,
    "jit of vmap": STAGING,
    "vmap of jit": STAGING,
    "grad of vmap": EAGER,
    # JAX 0.10 folds constants there but keeps the jit's trace: stock's loop is staged.
    "compile-time eval in jit": STAGING,
    # A batching rule runs on concrete, batched values: at the top level, unless a named axis
    # is in scope (which JAX keys its own jit caches on).
    "custom_vmap rule": TOP,
    "custom_vmap rule, named axis": EAGER,
}


def _with_vmap_rule(f):
    @jax.custom_batching.custom_vmap
    def g(x):
        return x

    @g.def_vmap
    def rule(axis_size, in_batched, x):
        f(x)
        return x, in_batched[0]

    return g


def _eval_inside(f, x):
    with jax.ensure_compile_time_eval():
        f(X)
    return x


@pytest.mark.parametrize("context", CONTEXTS)
def test_enclosing_reads_jax_trace_context(context):
    seen = []

    def f(x):
        seen.append((enclosing(), may_cache()))
        return x

    CONTEXTS[context](f)
    assert seen and set(seen) == {(WHERE[context], WHERE[context] == TOP)}


def test_nothing_to_cache_under_disable_jit():
    seen = []
    with jax.disable_jit():
        seen.append((enclosing(), may_cache()))
    assert seen == [(TOP, False)]
    # lax runs the loop in Python there, with concrete values: so do the wrappers.
    with jax.disable_jit():
        assert stablejit.while_loop(lambda c: float(c) < 3.0, lambda c: c + 1.0, 0.0) == 3.0
    assert stablejit.cache_info().misses == 0


# --- each wrapper's jaxpr is stock's, equation for equation, under every transformation --------


def _while(loops, x):
    return loops.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * W + x), (0, x))[1]


def _fori_static(loops, x):
    return loops.fori_loop(0, 3, lambda i, c: jnp.sin(c) * W + i, x)


def _fori_dynamic(loops, x):
    return loops.fori_loop(jnp.int32(0), jnp.int32(3), lambda i, c: jnp.sin(c) * W, x)


def _scan(loops, x):
    return loops.scan(lambda c, e: (c * e + W, c.sum()), x, jnp.arange(1.0, 4.0))[0]


def _scan_read_only_carry(loops, x):
    # A carry the body returns unchanged: JAX moves it out of the loop.
    (_, y), _ = loops.scan(lambda c, _: ((c[0], c[1] * c[0]), None), (W, x), None, length=2)
    return y


def _scan_debug_callback(loops, x):
    # Library code looks for the callback inside the scan body.
    def body(c, e):
        jax.debug.callback(_ignore, c)
        return c * e, None

    return loops.scan(body, x, jnp.arange(1.0, 3.0))[0]


def _ignore(*_):
    pass


def _cond(loops, x):
    return loops.cond(x.sum() > 0, lambda y: y * W, lambda y: y - W, x)


def _cond_forwarding(loops, x):
    # A branch output that is an operand unchanged: JAX forwards it around the cond.
    return loops.cond(x.sum() > 0, lambda a, b: (a * W, b), lambda a, b: (a, b), x, x)[1]


def _cond_legacy(loops, x):
    return loops.cond(x.sum() > 0, x, lambda y: y * W, x, jnp.cos)


def _cond_operand_keyword(loops, x):
    return loops.cond(x.sum() > 0, jnp.sin, lambda y: y * W, operand=x)


def _switch(loops, x):
    return loops.switch(jnp.int32(x.sum() > 0), [jnp.sin, jnp.cos, lambda y: y * W], x)


def _map(loops, x):
    return loops.map(lambda r: r * W, jnp.stack([x, 2 * x]))[1]


# The traced value reaches these only through their closures: their explicit operands are
# concrete, as at the top level.


def _while_closure(loops, x):
    return loops.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * x), (0, W))[1]


def _fori_closure(loops, x):
    return loops.fori_loop(0, 2, lambda i, c: c + x * i, W)


def _scan_closure(loops, x):
    return loops.scan(lambda c, e: (c + x * e, None), W, jnp.arange(2.0))[0]


def _cond_closure(loops, x):
    return loops.cond(True, lambda: x * W, lambda: x)


def _switch_closure(loops, x):
    return loops.switch(1, [lambda: x, lambda: jnp.sin(x)])


def _map_closure(loops, x):
    return loops.map(lambda r: r * x, jnp.stack([W, W]))[0]


PROGRAMS = {
    f.__name__[1:]: f
    for f in (
        _while,
        _fori_static,
        _fori_dynamic,
        _scan,
        _scan_read_only_carry,
        _scan_debug_callback,
        _cond,
        _cond_forwarding,
        _cond_legacy,
        _cond_operand_keyword,
        _switch,
        _map,
        _while_closure,
        _fori_closure,
        _scan_closure,
        _cond_closure,
        _switch_closure,
        _map_closure,
    )
}

# Staged, so that each leaves a jaxpr to compare; ``x -> array of X's shape`` in, jaxpr out.
STAGED = {
    "make_jaxpr": lambda f: f,
    **_transforms.TRANSFORMS,
    "cond branch": lambda f: lambda x: COND(x[0] > 0, f, jnp.sin, x),
    "shard_map": _shard_map,
    "vmap of grad": lambda f: jax.vmap(jax.grad(lambda x: f(x).sum())),
}


def _normal(message: str) -> str:
    return re.sub(r"0x[0-9a-f]+", "0x…", message)


def outcome(run):
    """What ``run()`` gives: ("ok", value) or ("raises", exception type, message)."""
    try:
        return ("ok", run())
    except Exception as e:  # noqa: BLE001 - any exception, compared with stock's
        return ("raises", type(e), _normal(str(e)))


def three_ways(make):
    """``make(loops)`` for stock lax, the wrappers directly, and lax under patch()."""
    stock = outcome(lambda: make(lax))
    direct = outcome(lambda: make(stablejit))
    with stablejit.patch():
        patched = outcome(lambda: make(lax))
    return stock, direct, patched


@pytest.fixture
def wrappers(monkeypatch):
    """How many cached loop programs the wrappers made (none, where lax must run)."""
    made = []
    real = stablejit._loops._run
    monkeypatch.setattr(stablejit._loops, "_run", lambda *a: made.append(a) or real(*a))
    return made


def _jaxpr(transform, program):
    # (Addresses differ between traces: a debug callback's function, in some JAX versions.)
    return lambda loops: _normal(str(jax.make_jaxpr(transform(lambda x: program(loops, x)))(X)))


@pytest.mark.parametrize("transform", STAGED)
@pytest.mark.parametrize("program", PROGRAMS)
def test_jaxpr_equals_stock_under_each_transformation(program, transform, wrappers):
    stock, direct, patched = three_ways(_jaxpr(STAGED[transform], PROGRAMS[program]))
    assert direct == stock
    assert patched == stock
    assert wrappers == []  # no wrapper of ours was even made


def _eager(run):
    def values(loops):
        return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(run(loops))]

    return values


EAGER_RUNS = {
    "vmap": lambda f: jax.vmap(f)(jnp.stack([X, 2 * X])),
    "grad": lambda f: jax.grad(lambda x: f(x).sum())(X),
    "jvp": lambda f: jax.jvp(f, (X,), (X,)),
    "linearize": lambda f: jax.linearize(f, X)[1](X),
    "shard_map": lambda f: _shard_map(f)(X),
}


def _same(got, want):
    assert got[0] == want[0], (got, want)
    if got[0] == "raises":
        assert got == want
    else:
        for a, b in zip(got[1], want[1], strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("transform", EAGER_RUNS)
@pytest.mark.parametrize("program", PROGRAMS)
def test_eager_transformation_runs_stock_loops(program, transform, wrappers):
    run = EAGER_RUNS[transform]
    stock, direct, patched = three_ways(
        _eager(lambda loops: run(lambda x: PROGRAMS[program](loops, x)))
    )
    _same(direct, stock)
    _same(patched, stock)
    # (Not cache_info's misses: under patch(), a JAX whose eager shard_map calls jax.jit
    # itself, as 0.6 does, has stable_jit serve that, as patch() means it to.)
    assert wrappers == []


# --- the examples ------------------------------------------------------------------------


def test_vmap_of_cond_forwarding_an_unbatched_scan_carry_runs_as_stock():
    def f4(loops, x, y):
        def g(_, y):
            y, _ = loops.scan(lambda y, _: (y, None), y, None, length=1)
            return y

        return loops.cond(x < 0, g, g, x, y)

    for loops in (lax, stablejit):
        out = jax.vmap(lambda x, y, m=loops: f4(m, x, y), (0, None), None)(jnp.arange(3.0), 3.0)
        assert float(out) == 3.0
    with stablejit.patch():
        out = jax.vmap(lambda x, y: f4(lax, x, y), (0, None), None)(jnp.arange(3.0), 3.0)
        assert float(out) == 3.0


def test_library_code_finds_the_loop_primitives():
    def f(loops, x):
        c = loops.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] + 1), (0, x))
        return c[1] + loops.switch(0, [jnp.sin, jnp.cos], x.astype(jnp.float32))

    def names(loops):
        return [
            e.primitive.name
            for e in jax.make_jaxpr(jax.vmap(lambda x: f(loops, x)))(jnp.arange(3)).jaxpr.eqns
        ]

    stock, direct, patched = three_ways(names)
    assert stock[0] == "ok" and "while" in stock[1] and "cond" in stock[1]
    assert direct == patched == stock


# --- bad input: lax's own exception, at every level ---------------------------------------------


def _leaked():
    box = []
    JIT(lambda x: box.append(x) or x)(1.0)
    return box[0]


def _inc(c):
    return c + 1


BAD = {
    "cond: string pred": lambda m: m.cond("a", _inc, _inc, 1),
    "cond: vector pred": lambda m: m.cond(np.array([1, 2]), _inc, _inc, 1),
    "cond: None pred": lambda m: m.cond(None, _inc, _inc, 1),
    "cond: complex pred": lambda m: m.cond(1j, _inc, _inc, 1),
    "cond: string operand": lambda m: m.cond(True, _inc, _inc, "s"),
    "cond: branch outputs differ": lambda m: m.cond(True, lambda: 1.0, lambda: 2),
    "cond: legacy, string operand": lambda m: m.cond(True, "s", _inc, 1, _inc),
    "switch: float index": lambda m: m.switch(1.5, [_inc, _inc], 1),
    "switch: bool index": lambda m: m.switch(True, [_inc, _inc], 1),
    "switch: vector index": lambda m: m.switch(np.array([0, 1]), [_inc, _inc], 1),
    "switch: no branches": lambda m: m.switch(0, [], 1),
    "switch: a generator of branches": lambda m: m.switch(0, (b for b in [_inc, _inc]), 1),
    "scan: a list of ints": lambda m: m.scan(lambda c, x: (c, x), 0, list(range(5))),
    "scan: nothing to scan": lambda m: m.scan(lambda c, x: (c, x), 0, None),
    "scan: a scalar": lambda m: m.scan(lambda c, x: (c, x), 0, 3.0),
    "scan: a numpy scalar": lambda m: m.scan(lambda c, x: (c, x), 0, np.float32(3.0)),
    "scan: lengths differ": lambda m: m.scan(lambda c, x: (c, x), 0, (jnp.zeros(3), jnp.zeros(4))),
    "scan: length disagrees": lambda m: m.scan(lambda c, x: (c, x), 0, jnp.zeros(3), length=4),
    "scan: not callable": lambda m: m.scan(3, 0, jnp.zeros(3)),
    "scan: carry changes type": lambda m: m.scan(lambda c, x: (x, x), jnp.int32(0), jnp.zeros(3)),
    "while_loop: string init": lambda m: m.while_loop(lambda c: c < 3, _inc, "s"),
    "while_loop: int too large": lambda m: m.while_loop(lambda c: c < 3, _inc, 2**40),
    "while_loop: not callable": lambda m: m.while_loop(None, _inc, 0),
    "while_loop: body changes type": lambda m: m.while_loop(
        lambda c: c < 3, lambda c: c + 1.0, jnp.int32(0)
    ),
    "while_loop: a leaked tracer": lambda m: m.while_loop(lambda c: c < 3, _inc, _leaked()),
    "fori_loop: float bounds": lambda m: m.fori_loop(0.0, 3, lambda i, c: c, 0),
    "fori_loop: string init": lambda m: m.fori_loop(0, 3, lambda i, c: c, "s"),
    "map: a scalar": lambda m: m.map(_inc, 3.0),
    "map: not callable": lambda m: m.map(1, jnp.zeros(3)),
}

WHERE_BAD = {
    "top": lambda call: call(),
    "jit": lambda call: JIT(lambda x: (call(), x)[1])(X),
    "vmap": lambda call: jax.vmap(lambda x: (call(), x)[1])(jnp.stack([X, X])),
}


@pytest.mark.parametrize("where", WHERE_BAD)
@pytest.mark.parametrize("bad", BAD)
def test_bad_input_raises_lax_exception_and_message(bad, where):
    stock, direct, patched = three_ways(lambda loops: WHERE_BAD[where](lambda: BAD[bad](loops)))
    assert stock[0] == "raises"
    assert direct == stock
    assert patched == stock
