"""Loop wrappers: bodies trace once across fresh closures; results equal lax's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import params as _params
from jax import lax

import stablejit
from stablejit._markers import Sentinel


def _greedy(params, n, eos, loop):
    """An HF-shaped greedy loop: closures over params and ints, defined per call."""

    def cond_fn(state):
        i, tok, done = state
        return (i < n) & ~done

    def body_fn(state):
        i, tok, done = state
        logits = jnp.tanh(params["w"][tok] + params["b"])
        nxt = jnp.argmax(logits).astype(jnp.int32)
        return i + 1, nxt, nxt == eos

    return loop(cond_fn, body_fn, (jnp.int32(0), jnp.int32(1), jnp.bool_(False)))


def test_while_loop_traces_once_across_fresh_closures_and_new_params(traces):
    def loop(cond_fn, body_fn, init):
        def counted(state):
            traces()
            return body_fn(state)

        return stablejit.while_loop(cond_fn, counted, init)

    for seed in range(4):
        p = _params(seed)
        got = _greedy(p, 6, 7, loop)
        want = _greedy(p, 6, 7, lax.while_loop)
        jax.tree_util.tree_map(np.testing.assert_array_equal, got, want)
    assert traces.n == 1
    _greedy(_params(0), 5, 7, loop)  # a new Python int: a new variant
    assert traces.n == 2


def test_fori_loop_static_and_dynamic_bounds(traces):
    def run(w, upper):
        def body(i, acc):
            traces()
            return acc + w * i

        return stablejit.fori_loop(0, upper, body, jnp.zeros(3))

    for k in range(3):
        w = jnp.full(3, float(k))
        np.testing.assert_allclose(
            run(w, 5), lax.fori_loop(0, 5, lambda i, a, w=w: a + w * i, jnp.zeros(3))
        )
    assert traces.n == 1
    np.testing.assert_allclose(run(jnp.ones(3), jnp.int32(4)), jnp.full(3, 6.0))
    np.testing.assert_allclose(run(jnp.ones(3), jnp.int32(5)), jnp.full(3, 10.0))
    assert traces.n == 2


def test_scan_with_length_reverse_and_unroll(traces):
    def run(w, reverse):
        def f(c, x):
            traces()
            return c * w + x, c

        return stablejit.scan(f, 1.0, jnp.arange(5.0), reverse=reverse, unroll=2)

    for w in (0.5, 0.5, 2.0):
        for reverse in (False, True):
            got = run(jnp.float32(w), reverse)
            want = lax.scan(lambda c, x, w=w: (c * w + x, c), 1.0, jnp.arange(5.0), reverse=reverse)
            jax.tree_util.tree_map(np.testing.assert_allclose, got, want)
    assert traces.n == 2  # one per value of the static `reverse`
    carry, ys = stablejit.scan(lambda c, _: (c + 1, c), 0, None, length=3)
    assert int(carry) == 3 and ys.tolist() == [0, 1, 2]


def test_cond_and_switch(traces):
    def run(pred, w):
        def yes(x):
            traces()
            return x + w

        return stablejit.cond(pred, yes, lambda x: x - w, jnp.ones(2))

    for pred in (True, False, True):
        w = jnp.full(2, 3.0)
        np.testing.assert_array_equal(
            run(pred, w), lax.cond(pred, lambda x, w=w: x + w, lambda x, w=w: x - w, jnp.ones(2))
        )
    assert traces.n == 1
    branches = [lambda x: x, lambda x: 2 * x, lambda x: 3 * x]
    for i in (0, 2, 7, -1):
        assert float(stablejit.switch(i, branches, 1.0)) == float(lax.switch(i, branches, 1.0))


def test_map():
    w = jnp.arange(3.0)
    np.testing.assert_array_equal(
        stablejit.map(lambda x: x * w, jnp.ones((4, 3))), lax.map(lambda x: x * w, jnp.ones((4, 3)))
    )


def test_under_grad_vmap_and_jit():
    def loss(w):
        _, ys = stablejit.scan(lambda c, x: (c * w + x, c * w), 1.0, jnp.arange(4.0))
        return ys.sum() + stablejit.fori_loop(0, 3, lambda i, a: a * w, 1.0)

    def lax_loss(w):
        _, ys = lax.scan(lambda c, x: (c * w + x, c * w), 1.0, jnp.arange(4.0))
        return ys.sum() + lax.fori_loop(0, 3, lambda i, a: a * w, 1.0)

    np.testing.assert_allclose(jax.grad(loss)(0.7), jax.grad(lax_loss)(0.7), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.grad(loss))(0.7), jax.grad(lax_loss)(0.7), rtol=1e-6)
    ws = jnp.array([0.5, 0.7, 0.9])
    np.testing.assert_allclose(jax.vmap(loss)(ws), jax.vmap(lax_loss)(ws), rtol=1e-6)
    p = _params(3)
    got = jax.jit(lambda p: _greedy(p, 6, 7, stablejit.while_loop))(p)
    jax.tree_util.tree_map(np.testing.assert_array_equal, got, _greedy(p, 6, 7, lax.while_loop))


def test_loop_counters_are_per_loop_body():
    stablejit.while_loop(lambda i: i < 3, lambda i: i + 1, 0)
    stablejit.while_loop(lambda i: i < 3, lambda i: i + 2, 0)
    assert stablejit.cache_info().misses == 2


def test_fori_loop_numpy_int_bounds_are_static_so_reverse_differentiable():
    def loss(w):
        return stablejit.fori_loop(np.int32(0), np.int64(3), lambda i, a: a * w, 1.0)

    np.testing.assert_allclose(jax.grad(loss)(2.0), 3 * 2.0**2)


_LOOPS = ("while_loop", "fori_loop", "scan", "cond", "switch", "map")


def _is_sentinel(default) -> bool:
    # lax's private "not given" markers (``operand=``'s default) are bare
    # objects; ours are stablejit's markers.
    return type(default) is object or type(default) is Sentinel


@pytest.mark.parametrize("name", _LOOPS)
def test_each_wrapper_has_the_installed_lax_signature(name):
    import inspect

    ours = inspect.signature(getattr(stablejit, name)).parameters
    theirs = inspect.signature(getattr(lax, name)).parameters
    assert list(ours) == list(theirs)
    for p, q in zip(ours.values(), theirs.values(), strict=True):
        assert p.kind == q.kind, p.name
        if _is_sentinel(q.default):
            assert _is_sentinel(p.default), p.name
        else:
            assert p.default == q.default, p.name


def _calls(loops):
    """The same calls, in every convention ``jax.lax`` accepts, through ``loops``."""
    add, sub = (lambda x: x + 1.0), (lambda x: x - 1.0)
    xs = jnp.arange(3.0)
    return [
        loops.cond(True, add, sub, 1.0),
        loops.cond(False, add, sub, operand=1.0),
        loops.cond(jnp.bool_(False), 1.0, add, 5.0, sub),  # legacy: operands beside branches
        loops.cond(pred=True, true_fun=add, false_fun=sub, operand=2.0),
        loops.switch(1, [add, sub], 3.0),
        loops.switch(index=0, branches=(add, sub), operand=3.0),
        loops.scan(lambda c, _: (c + 1.0, c), 0.0, length=4),
        loops.scan(lambda c, x: (c + x, c), 0.0, xs, reverse=True, unroll=2),
        loops.scan(f=lambda c, x: (c * x, x), init=1.0, xs=xs + 1.0),
        loops.fori_loop(0, 3, lambda i, c: c + i, 0, unroll=True),
        loops.fori_loop(lower=jnp.int32(1), upper=4, body_fun=lambda i, c: c * i, init_val=1),
        loops.while_loop(cond_fun=lambda c: c < 5, body_fun=lambda c: c + 2, init_val=0),
        loops.map(lambda x: x * 2, xs, batch_size=2),
        loops.map(f=jnp.sin, xs=xs),
    ]


def test_every_calling_convention_gives_lax_results():
    for got, want in zip(_calls(stablejit), _calls(lax), strict=True):
        jax.tree_util.tree_map(np.testing.assert_allclose, got, want)


def test_legacy_cond_traces_once_across_fresh_branches(traces):
    def step(y):
        def neg(x):
            traces()
            return -x

        return stablejit.cond(y > 0, y, lambda x: x * x, y, neg)

    assert [float(step(v)) for v in (3.0, -2.0, 4.0)] == [9.0, 2.0, 16.0]
    assert traces.n == 1


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.cond(True, lambda x: x, lambda x: x, 1.0, operand=2.0),
        lambda m: m.cond(True, 1, 2),
        lambda m: m.switch(0, [lambda x: x], 1.0, operand=2.0),
        lambda m: m.switch(0, [1, 2], 1.0),
    ],
)
def test_calls_lax_rejects_raise_lax_errors(call):
    with pytest.raises(TypeError) as ours:
        call(stablejit)
    with pytest.raises(TypeError) as theirs:
        call(lax)
    assert str(ours.value) == str(theirs.value)


def test_every_kind_of_jax_value_in_a_carry_takes_the_cache(traces):
    # The check that sends input lax rejects straight to lax must pass all
    # that lax takes: else those loops silently lose the cache.
    carry = (
        jnp.arange(3.0),
        np.arange(2, dtype=np.int8),
        np.float32(1.5),
        jnp.bfloat16(2.0),
        7,
        0.5,
        True,
        jax.random.key(0),
        jax.random.PRNGKey(1),
    )

    def run(k):
        def body(c):
            traces()
            return (c[0] + k, *c[1:])

        return stablejit.while_loop(lambda c: c[0][0] < 2.0, body, carry)

    for k in (1.0, 1.0, 0.5):
        got = run(jnp.float32(k))
        want = lax.while_loop(lambda c: c[0][0] < 2.0, lambda c, k=k: (c[0] + k, *c[1:]), carry)
        for a, b in zip(got, want, strict=True):
            if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
                a, b = jax.random.key_data(a), jax.random.key_data(b)
            np.testing.assert_array_equal(a, b)
    assert traces.n == 1
