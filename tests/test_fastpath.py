"""The fingerprint's fast path: a redefined closure, re-checked by identity instead of walked.

Per code object, stablejit keeps a record of what each child of the last function of that code
was; a later function whose children fit the record has the same key, found without a walk.
Anything else takes the full walk, whose keys the fast path's must equal.
"""

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import count_trace as _traced
from _helpers import key as _key

import stablejit
from stablejit import _native as native
from stablejit import stable_jit


def _record(f):
    from stablejit._fingerprint.code import code_info

    return code_info(f.__code__).fast.front


# Every test here runs with each kind of record checks: interpreted, generated Python, and
# the C accelerator's where it is built (see conftest's record_checks).
pytestmark = pytest.mark.usefixtures("record_checks")


@pytest.fixture
def call_functions(record_checks):
    """For tests of records' call functions, which only compiled records have."""
    if record_checks == "interpreted":
        pytest.skip("an interpreted record has no call function")


def test_back_references_count_the_same_with_and_without_the_fast_path(traces):
    # A library function reached by a full walk must not take a number that a
    # fast-path match of the same function does not: the back reference ("b
    # is a") after it would differ, and a trace counter (which invalidates
    # fast paths) would then cost a retrace per call.
    from os.path import join  # a library function, keyed by identity

    def helper(x):
        return x if join else None

    def run(w):
        a = b = [2.0]

        def f(x):
            traces()
            return helper(x) * a[0] * b[0] * w

        return stable_jit(f)(jnp.ones(2))

    for i in range(4):
        np.testing.assert_array_equal(run(jnp.full(2, float(i))), [4.0 * i] * 2)
    assert traces.n == 1


# ------------------------------------------- the fast path over nested closures
# A redefined closure whose children are numbers, arrays, modules and other
# such closures (an optax optimiser) is re-checked by identity instead of
# walked. These tests check that the re-check sees every change a walk sees.


def _optimiser(lr, w):
    def scale(g):
        return g * lr

    def shift(g):
        return g + w

    def update(g):
        return shift(scale(g))

    return update


def test_redefined_closure_of_closures_hits_by_the_fast_path_and_lifts_arrays(traced):
    def step(lr, w, x):
        update = _optimiser(lr, w)

        def f(x):
            _traced()
            return update(x)

        return stable_jit(f)(x)

    x = jnp.arange(3.0)
    for i in range(4):
        w = jnp.full(3, float(i))
        np.testing.assert_allclose(step(0.5, w, x), x * 0.5 + i)
    assert traced() == 1
    assert _record(_optimiser(0.5, w)).nested


def test_fast_path_sees_a_changed_number_in_a_nested_closure(traces):
    def run(lr):
        update = _optimiser(lr, jnp.ones(2))

        def f(x):
            traces()
            return update(x)

        return stable_jit(f)(jnp.ones(2))

    for lr, n in [(0.5, 1), (0.5, 1), (2.0, 2), (float("0.5"), 2), (2, 3), (-0.0, 4), (0.0, 5)]:
        np.testing.assert_allclose(run(lr), jnp.ones(2) * lr + 1)
        assert traces.n == n


def test_fast_path_sees_a_rebound_cell_and_global_of_a_nested_closure(traces):
    ns = {"jnp": jnp, "K": 2.0}
    exec("def make(c):\n    def inner(y):\n        return y * c + K\n    return inner", ns)
    inner = ns["make"](3.0)

    def f(x):
        traces()
        return inner(x)

    g = stable_jit(f)
    x = jnp.ones(2)
    np.testing.assert_allclose(g(x), x * 3 + 2)
    np.testing.assert_allclose(g(x), x * 3 + 2)
    inner.__closure__[0].cell_contents = 5.0  # jax.jit would return x * 3 + 2
    np.testing.assert_allclose(g(x), x * 5 + 2)
    ns["K"] = 7.0
    np.testing.assert_allclose(g(x), x * 5 + 7)
    assert traces.n == 3


def test_nested_closures_of_one_code_over_different_functions_are_told_apart():
    def wrap(act):
        return lambda y: act(y) + 1

    inner_fns = [lambda y: y * 2, lambda y: y * 3, jnp.tanh, lambda y: y * 2]
    x = jnp.arange(3.0)
    for _ in range(2):
        for act in inner_fns:
            outer = wrap(wrap(act))
            f = stable_jit(lambda x, outer=outer: outer(x))
            np.testing.assert_allclose(f(x), act(x) + 2, rtol=1e-6)


def test_a_function_held_twice_keys_as_a_back_reference_on_the_fast_path(traced):
    class Transform(NamedTuple):
        init: object
        update: object

    def make(lr, w):
        def init(p):
            return p * 0

        def update(g):
            return g * lr + w

        chain = (Transform(init, update), (update, init))

        def f(x):
            _traced()
            t, (u, i) = chain
            return t.update(x) + u(x) + i(x) + t.init(x)

        return f

    x = jnp.arange(3.0)
    for i in range(4):
        np.testing.assert_allclose(stable_jit(make(0.5, float(i) * jnp.ones(3)))(x), x + 2 * i)
    assert traced() == 1
    assert _record(make(0.5, x)).nested

    def make_distinct(lr, w):  # two updates of one code where `chain` held one twice
        f = make(lr, w)
        _, (u, i) = f.__closure__[0].cell_contents
        other = make(lr, w).__closure__[0].cell_contents[0]
        f.__closure__[0].cell_contents = (other, (u, i))
        return f

    np.testing.assert_allclose(stable_jit(make_distinct(0.5, x))(x), 2 * (x * 0.5 + x))
    assert traced() == 2
    # Keys equal a full walk's whichever structure the record was built from.
    shared, distinct = _key(make(0.5, x)), _key(make_distinct(0.5, x))
    assert shared != distinct == _key(make_distinct(0.5, x))
    assert _key(make(0.5, x)) == shared


def test_self_recursive_closure_takes_the_fast_path(traced):
    def make(w):
        def f(x, n=2):
            if n == 2:
                _traced()
            return x if n == 0 else f(x * w, n - 1)

        return f

    x = jnp.ones(2)
    for i in range(1, 4):
        np.testing.assert_allclose(stable_jit(make(jnp.full(2, float(i))))(x), x * i**2)
    assert traced() == 1
    assert _record(make(x)) is not None


def test_closure_over_none_takes_the_fast_path(traced):
    def make(w, mask=None):
        def f(x):
            _traced()
            return x * w if mask is None else x * w * mask

        return f

    x = jnp.ones(2)
    for i in range(3):
        np.testing.assert_allclose(stable_jit(make(float(i) * x))(x), x * i)
    assert _record(make(x)) is not None
    np.testing.assert_allclose(stable_jit(make(x, mask=x * 3))(x), x * 3)
    assert traced() == 2


def test_one_code_at_two_places_of_different_shape_keeps_a_record_for_each():
    # optax wraps every transform of a chain in a closure of one code; each
    # place must keep its record rather than rebuild one per walk.
    def wrap(tx):
        def update(g):
            return tx[1](g)

        return update

    def make(lr, w):
        a = wrap((None, lambda g: g * lr))
        b = wrap((jnp.tanh, lambda g: g + w))
        return {"chain": (a, b)}  # a dict: the outer function always takes the walk

    def run(lr, w):
        opt = make(lr, w)

        def f(x):
            a, b = opt["chain"]
            return b(a(x))

        return stable_jit(f)(jnp.ones(2))

    from stablejit._fingerprint.code import code_info

    np.testing.assert_allclose(run(0.5, jnp.ones(2)), [1.5, 1.5])
    info = code_info(wrap(None).__code__)
    kept = [info.fast.front, *info.fast.others]  # held, so that no new record can reuse an address
    for i in range(3):
        np.testing.assert_allclose(run(0.5, jnp.full(2, float(i))), [0.5 + i] * 2)
    now = [info.fast.front, *info.fast.others]
    assert len(now) == len(kept) == 2 and all(any(r is k for k in kept) for r in now)


# ------------------------------------------------------- under lift_scalars=True
# The fast path (re-checking a redefined closure by identity) under
# lift_scalars=True: lifted numbers are re-checked by type and passed on.


def _adam_like(lr, b1, n):
    def scale(g):
        return g * lr

    def moment(g):
        return g * b1 + n

    def update(g):
        _traced()
        return moment(scale(g))

    return update


def test_fast_path_under_lift_scalars_passes_new_floats_without_retracing(traced):
    x = jnp.arange(3.0)
    for lr, b1 in [(0.1, 0.9), (0.2, 0.8), (0.3, 0.7), (-0.0, 0.5), (0.5, 1e-8)]:
        f = _adam_like(lr, b1, 2)
        np.testing.assert_allclose(stable_jit(f, lift_scalars=True)(x), x * lr * b1 + 2, rtol=1e-6)
    assert traced() == 1
    record = _record(f)
    assert record is not None and record.lift is True
    # An int is static under lift_scalars=True, and a complex is not a float.
    np.testing.assert_allclose(stable_jit(_adam_like(0.5, 0.5, 3), lift_scalars=True)(x), x / 4 + 3)
    assert traced() == 2
    out = stable_jit(_adam_like(0.5, 0.5 + 0j, 3), lift_scalars=True)(x)
    np.testing.assert_allclose(out, x / 4 + 3)
    assert traced() == 3


def test_fast_path_records_of_one_lift_mode_do_not_serve_the_other(traced):
    x = jnp.ones(2)
    for lr in (0.5, 0.25, 0.5, 0.25):
        np.testing.assert_allclose(stable_jit(_adam_like(lr, 1.0, 0))(x), x * lr)
        np.testing.assert_allclose(stable_jit(_adam_like(lr, 1.0, 0), lift_scalars=True)(x), x * lr)
    assert traced() == 3  # two static variants, one lifted


def test_float_defaults_under_lift_scalars_are_walked_and_lifted(traced):

    def make(scale):
        def f(x, s=scale):
            _traced()
            return x * s

        return f

    for s in (2.0, 3.0, 4.0):
        np.testing.assert_allclose(stable_jit(make(s), lift_scalars=True)(jnp.ones(2)), [s, s])
    assert traced() == 1
    assert _record(make(1.0)) is None


# ------------------------------------------------------------------ baked arrays


def test_the_fast_path_never_serves_a_baked_variant():
    # A closure over arrays alone is what the per-code fast path re-checks by
    # type: a baked array must be re-checked by contents instead.
    def make(mask):
        def f(x):
            return x * 2.0 if mask.any() else x

        return stable_jit(f)

    mask, x = np.array([False]), jnp.ones(1)
    for _ in range(3):
        np.testing.assert_array_equal(make(mask)(x), [1.0])
    mask[0] = True
    np.testing.assert_array_equal(make(mask)(x), [2.0])


def test_a_closure_served_by_its_own_call_function_retraces_for_new_shapes(call_functions, traced):
    # Once a record's checks are compiled, stable_jit hands out partials of the
    # record's own call function; a trace started there (new shapes) must find
    # the function being called, with its own arrays.
    def outer(x, w):
        def f(x):
            _traced()
            return x * w

        return stable_jit(f)

    for _ in range(8):
        jitted = outer(jnp.ones(2), jnp.full(2, 3.0))
        np.testing.assert_allclose(jitted(jnp.ones(2)), jnp.full(2, 3.0))
    assert jitted._call is _record(jitted.__wrapped__).call is not None
    for n in (3, 4):
        w = jnp.arange(float(n))
        np.testing.assert_allclose(outer(None, w)(jnp.ones(n)), w)
    assert traced() == 3


def test_a_function_whose_code_is_replaced_after_wrapping_is_keyed_anew(call_functions):
    # A partial of a record's call function holds the function, whose code a
    # program can still replace: that record's checks are then not its.
    def outer():
        def f(x):
            return x * 2

        return stable_jit(f), f

    for _ in range(8):
        jitted, f = outer()
        np.testing.assert_array_equal(jitted(jnp.ones(2)), [2.0, 2.0])
    assert jitted._call is _record(f).call is not None

    def g(x):
        return x * 3

    jitted, f = outer()
    f.__code__ = g.__code__
    np.testing.assert_array_equal(jitted(jnp.ones(2)), [3.0, 3.0])


def _inner_of(w):
    """``stable_jit`` of a closure over ``w`` that counts its traces."""

    def inner(x):
        _traced()  # (inline: a helper function would need the Python checks)
        return x * w

    return stable_jit(inner)


def test_closures_served_by_call_functions_traced_inside_each_other_find_their_own(
    call_functions, traced
):
    # A trace started below a call function finds the function being called:
    # a Python one from its frame, a native one from what it publishes with
    # the entry it calls. Nested either way, each finds its own.
    def outer_of(w, v):  # holds a NumPy constant: checked in Python
        host = np.zeros(1, np.float32)

        def outer(x):
            _traced()
            return _inner_of(v)(x) + w + host

        return stable_jit(outer)

    def looped_of(w):  # identity checks only: native, around a loop body's trace
        def looped(x):
            _traced()
            return stablejit.fori_loop(0, 2, lambda i, c: c * w, x)

        return stable_jit(looped)

    for n in range(1, 9):  # new shapes: each traces anew, from its call function
        w, v, x = jnp.full(n, 2.0), jnp.full(n, 3.0), jnp.ones(n)
        np.testing.assert_allclose(_inner_of(v)(x), x * v)
        np.testing.assert_allclose(outer_of(w, v)(x), x * v + w)
        np.testing.assert_allclose(looped_of(w)(x), x * w * w)
    assert traced() == 24
    for jitted, native_if_built in [
        (_inner_of(v), True),
        (outer_of(w, v), False),
        (looped_of(w), True),
    ]:
        assert jitted._call is _record(jitted.__wrapped__).call is not None
        if native.NATIVE is not None:
            assert (type(jitted._call) is native.NATIVE.RecordCall) is native_if_built


def test_a_native_call_traced_inside_a_python_calls_trace_finds_its_own(call_functions, traced):
    # The RecordCall publishes its function with the entry it calls; a trace of
    # that entry started inside another call's trace (whose Python frame is
    # further down the stack) is the RecordCall's.
    def outer_of(w):  # holds a NumPy constant: checked in Python
        host = np.zeros(1, np.float32)

        def outer(x):
            _traced()
            padded = _inner_of(3.0)(jnp.concatenate([x, jnp.zeros(10)]))  # shapes it never saw
            return padded[: x.shape[0]] + w + host

        return stable_jit(outer)

    for n in range(1, 6):
        w, x = jnp.full(n, 2.0), jnp.arange(float(n))
        np.testing.assert_allclose(_inner_of(3.0)(x), x * 3.0)
        np.testing.assert_allclose(outer_of(w)(x), x * 3.0 + w)
    assert traced() == 3 * 5
    if native.NATIVE is not None:
        assert type(_inner_of(3.0)._call) is native.NATIVE.RecordCall
        assert type(outer_of(w)._call) is not native.NATIVE.RecordCall


def test_defaults_computed_at_each_definition_take_the_fast_path(
    record_checks, traced, monkeypatch
):
    # `def f(x, m=n, *, k=scale)` builds a new tuple and dict at each definition:
    # equal atoms in them are the same key, checked without the full walk.
    from stablejit._runtime import calls

    def make(n, scale):
        def f(x, m=n, *, k=scale):
            _traced()
            return x * m + k

        return stable_jit(f)

    x = jnp.ones(2)
    for _ in range(4):
        np.testing.assert_allclose(make(3, 0.5)(x), x * 3 + 0.5)
    walks = []
    real = calls.call_key
    monkeypatch.setattr(calls, "call_key", lambda *a: walks.append(1) or real(*a))
    for _ in range(3):
        np.testing.assert_allclose(make(3, float("0.5"))(x), x * 3 + 0.5)  # another float
    assert (walks, traced()) == ([], 1)
    # Other values are other keys: a number, a float's sign, a bool for an int.
    for n, scale, want in [
        (4, 0.5, x * 4 + 0.5),
        (3, 0.0, x * 3),
        (3, -0.0, x * 3),
        (True, -0.0, x),
    ]:
        np.testing.assert_allclose(make(n, scale)(x), want)
    assert traced() == 5


def test_a_record_made_under_one_side_channel_table_is_not_used_under_another(
    record_checks, traced, monkeypatch
):
    # A record's checks skip the side channels known when it was made; once
    # the table is replaced (a trace found a new one), the record may skip
    # what is no longer right to skip, so the next call takes the full walk.
    from stablejit._fingerprint import sinks
    from stablejit._runtime import calls

    def make(scale):
        def f(x):
            _traced()
            return x * scale

        return stable_jit(f)

    x = jnp.ones(2)
    for _ in range(4):
        make(2.0)(x)
    walks = []
    real = calls.call_key
    monkeypatch.setattr(calls, "call_key", lambda *a: walks.append(1) or real(*a))
    make(2.0)(x)
    assert walks == []
    sinks.add([([], sinks.ALL)])
    np.testing.assert_allclose(make(2.0)(x), x * 2.0)
    assert (len(walks), traced()) == (1, 1)
