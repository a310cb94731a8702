"""Side channels: what a function writes while traced (trace counters) is keyed by identity.

Test suites and libraries count traces through a list, a dict item, a global or a ``nonlocal``
the traced function writes. Such state becomes a side channel after its first trace: keyed by
which object it is rather than by its contents, so that counting never causes a retrace, while
everything else stays keyed.
"""

import functools

import jax.numpy as jnp
import numpy as np
import pytest

import stablejit
from stablejit import stable_jit

# ------------------------------------------------------------------ trace counters

TRACE_LOG = []
GLOBAL = {"count": 0}


def _scaled(k):
    def inner(x):
        TRACE_LOG.append(k)
        return x * k

    return stable_jit(inner)


def test_global_trace_counter_list_does_not_cause_retraces():
    TRACE_LOG.clear()
    for k in [2, 2, 3, 2, 3, 3, 2]:
        np.testing.assert_array_equal(_scaled(k)(jnp.ones(2)), [k, k])
    assert TRACE_LOG == [2, 3]


def test_numpyro_style_global_counter_dict():
    GLOBAL["count"] = 0

    def make(k):
        def inner(x):
            GLOBAL["count"] += 1
            return x + k

        return stable_jit(inner)

    for k in [1, 1, 2, 1, 2]:
        np.testing.assert_array_equal(make(k)(jnp.zeros(1)), [k])
    assert GLOBAL["count"] == 2


def test_nonlocal_trace_counter():
    def make(k):
        n = 0

        def inner(x):
            nonlocal n
            n += 1
            return x + k

        return stable_jit(inner), lambda: n

    f, count = make(1)
    for _ in range(3):
        f(jnp.zeros(1))
    assert count() == 1


def test_closed_over_trace_list_in_a_factory():
    seen = []

    def make(k):
        def inner(x):
            seen.append(k)
            return x * k

        return stable_jit(inner)

    for k in [1, 2, 1, 2, 2]:
        make(k)(jnp.ones(1))
    assert seen == [1, 2]


def test_other_state_stays_keyed_after_a_counter_became_a_side_channel():
    cfg = {"calls": 0, "scale": 2}

    def f(x):
        cfg["calls"] += 1
        return x * cfg["scale"]

    g = stable_jit(f)
    np.testing.assert_array_equal(g(jnp.ones(1)), [2.0])
    np.testing.assert_array_equal(g(jnp.ones(1)), [2.0])
    assert cfg["calls"] == 1
    cfg["scale"] = 5
    np.testing.assert_array_equal(g(jnp.ones(1)), [5.0])
    assert cfg["calls"] == 2


def test_nonlocal_write_to_a_static_value_keeps_python_semantics():
    calls = 0

    def f(x):
        nonlocal calls
        calls += 1
        return x

    g = stable_jit(f)
    g(jnp.ones(1))
    g(jnp.ones(1))
    assert calls == 1  # like jax.jit: the body runs once, at trace time


# -------------------------------------------- a new function's own side channels
# jax.jit traces each new function object, so each one's trace writes into the lists and cells
# that function holds: a loop that redefines a function around a fresh list reads that list.


def _recording_shapes(shapes):
    def f(x):
        shapes.append(x.shape)
        return x * 2

    return f


def test_a_list_made_afresh_around_each_redefinition_gets_the_trace_writes():
    x = jnp.ones(2)
    for i in range(3):
        shapes = []
        g = stable_jit(_recording_shapes(shapes))
        np.testing.assert_array_equal(g(x), [2.0, 2.0])
        np.testing.assert_array_equal(g(x), [2.0, 2.0])  # its own later calls hit
        assert shapes == [(2,)]
        assert stablejit.num_traces(g) == i + 1  # (all redefinitions together): one each


def test_the_retrace_of_a_function_with_a_fresh_side_channel_names_it(explained):
    for _ in range(2):
        stable_jit(_recording_shapes([]))(jnp.ones(2))
    (message,) = explained()
    assert message.endswith(
        "retraced: closure variable 'shapes' is another object than the side channel an "
        "earlier trace wrote (traced, so that this one gets its trace's writes, as under jax.jit)"
    )


def _record_shape(shapes, x):
    shapes.append(x.shape)
    return x * 2


def test_a_fresh_list_given_to_a_partial_gets_the_trace_writes():
    for _ in range(2):
        shapes = []
        np.testing.assert_array_equal(
            stable_jit(functools.partial(_record_shape, shapes))(jnp.ones(2)), [2.0, 2.0]
        )
        assert shapes == [(2,)]


def test_a_nonlocal_counter_of_each_new_factory_closure_counts_its_trace():
    def make():
        n = 0

        def f(x):
            nonlocal n
            n += 1
            return x + 1

        return stable_jit(f), lambda: n

    for _ in range(3):
        f, count = make()
        np.testing.assert_array_equal(f(jnp.zeros(1)), [1.0])
        f(jnp.zeros(1))
        assert count() == 1


class _LazyScale:
    """Sets itself up on first use, while traced: its own attributes change, and a dict it
    holds (as flax's Scope fills its ``reservations``)."""

    def __init__(self, k):
        self.k, self.ready, self.names = k, False, {}

    def __call__(self, x):
        if not self.ready:
            self.factor, self.ready = float(self.k), True
            self.names["factor"] = "set up"
        return x * self.factor


def test_an_object_that_sets_itself_up_while_traced_shares_the_trace_of_its_equals():
    # Its attributes are its bookkeeping: a new object in the state the first was in traces to
    # the same program, so its calls hit (where keying it only after set-up would retrace).
    def make(model):
        return stable_jit(lambda x: model(x))

    fs = [make(_LazyScale(3)) for _ in range(3)]
    for f in fs:
        np.testing.assert_array_equal(f(jnp.ones(1)), [3.0])
    assert stablejit.num_traces(fs[-1]) == 1
    np.testing.assert_array_equal(make(_LazyScale(4))(jnp.ones(1)), [4.0])


# ---------------------------------------------- closure cells a trace rewrites


def _decay(steps):
    """A schedule that rewrites the value it reads while traced, as optax's
    cosine_decay_schedule does (``nonlocal decay_steps; decay_steps = float(...)``)."""

    def schedule(count):
        nonlocal steps
        steps = float(steps)
        return 1.0 - jnp.minimum(count, steps) / steps

    return schedule


def test_closures_whose_traces_rewrite_their_cells_never_share_a_trace():
    # Each trace turns its cell into a side channel; two such cells held
    # different values when traced, so keys must tell the cells apart.
    for steps in (20, 10, 4):
        f = stable_jit(_decay(steps))
        for count in range(3):  # later calls key the cell as a side channel
            np.testing.assert_allclose(f(count), 1.0 - min(count, steps) / steps, rtol=1e-6)


def test_lists_a_trace_appended_to_are_told_apart_by_identity():
    def make(log):
        def f(x):
            scale = len(log) + 1.0  # read, then appended to: a side channel
            log.append(1)
            return x * scale

        return stable_jit(f)

    first, second = [], [0, 0]
    np.testing.assert_array_equal(make(first)(jnp.ones(1)), [1.0])
    np.testing.assert_array_equal(make(second)(jnp.ones(1)), [3.0])
    np.testing.assert_array_equal(make(second)(jnp.ones(1)), [3.0])  # as traced for it


# ----------------------------------------------------------------- diagnostics


def test_side_channels_are_described_as_not_keyed():
    seen = []

    def f(x):
        seen.append(1)
        return x

    g = stable_jit(f)
    g(jnp.ones(1))
    assert (
        dict(stablejit.describe(g).static)["closure variable 'seen'"] == "(side channel: not keyed)"
    )


_COUNTED: list = []


def test_recompile_limit_leaves_a_trace_counter_out_of_what_changes(limit):
    limit.recompile_limit, limit.on_recompile_limit = 2, "warn"

    def make(k):
        def inner(x):
            _COUNTED.append(1)
            return x * k

        return stable_jit(inner)

    with pytest.warns(stablejit.RecompileLimitWarning) as record:
        for k in range(4):
            np.testing.assert_array_equal(make(float(k))(jnp.ones(1)), [float(k)])
    msg = str(record[0].message)
    assert "closure variable 'k' took 3 distinct values" in msg
    assert "_COUNTED" not in msg


def test_clear_cache_forgets_side_channels_and_a_later_trace_finds_them_again():
    from stablejit._fingerprint import sinks

    counter: list = []

    def make():
        def f(x):
            counter.append(1)
            return x + 1

        return stable_jit(f)

    x = jnp.ones(2)
    for _ in range(3):
        np.testing.assert_allclose(make()(x), x + 1)
    assert len(counter) == 1
    assert any(held is counter for held, _ in sinks.SINKS.values())
    stablejit.clear_cache()
    assert not any(held is counter for held, _ in sinks.SINKS.values())  # no longer held
    for _ in range(3):
        np.testing.assert_allclose(make()(x), x + 1)
    assert len(counter) == 2  # one trace after the clear, then hits again
    assert any(held is counter for held, _ in sinks.SINKS.values())
