"""Verify mode (``config.verify``): a hit traced again catches the staleness no key can see."""

import os
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablejit
from stablejit._config import Config
from stablejit._runtime import cache, verify
from stablejit._runtime.jaxpr_form import first_difference, form

pytest_plugins = ["pytester"]


@pytest.fixture
def verifying():
    """Verify mode at p = 1 for the test (set back to 0 after)."""
    stablejit.config.verify = 1.0
    yield stablejit.config
    stablejit.config.verify = 0.0


@pytest.fixture
def scale_env(monkeypatch):
    monkeypatch.setenv("STABLEJIT_TEST_SCALE", "1")
    return lambda v: monkeypatch.setenv("STABLEJIT_TEST_SCALE", str(v))


def scaled_by_env():
    """A function redefined per call whose trace reads ``os.environ``: no key
    can see the variable."""

    def f(x):
        return x * float(os.environ["STABLEJIT_TEST_SCALE"])

    return stablejit.stable_jit(f)


def errors(caplog):
    return [
        r.getMessage() for r in caplog.records if r.name == "stablejit" and r.levelname == "ERROR"
    ]


def test_verify_catches_a_trace_that_reads_os_environ(verifying, scale_env, record_checks, caplog):
    # Through every form of the hot path: the general call function, a
    # record's generated Python and the C accelerator's RecordCall.
    x = jnp.arange(3.0)
    for _ in range(4):
        np.testing.assert_allclose(scaled_by_env()(x), x)
    scale_env(3)
    np.testing.assert_allclose(
        scaled_by_env()(x), 3 * x
    )  # the fresh trace's result, not the stale one
    info = stablejit.cache_info()
    assert (info.verified, info.mismatches) == (4, 1)
    [message] = errors(caplog)
    assert "scaled_by_env.<locals>.f" in message
    assert "their keys are equal" in message
    assert "cached: " in message and "now: " in message
    assert message.count("stable_jit key of scaled_by_env.<locals>.f") == 2
    # The stale entry is dropped: the next call traces afresh, and hits from then on.
    np.testing.assert_allclose(scaled_by_env()(x), 3 * x)
    np.testing.assert_allclose(scaled_by_env()(x), 3 * x)
    info = stablejit.cache_info()
    assert (info.misses, info.verified, info.mismatches) == (2, 5, 1)


def test_without_verify_the_same_staleness_goes_unseen(scale_env):
    # What verify mode is for: the key cannot see os.environ, so a hit is stale.
    x = jnp.arange(3.0)
    scaled_by_env()(x)
    scale_env(3)
    np.testing.assert_allclose(scaled_by_env()(x), x)
    assert stablejit.cache_info().mismatches == 0


class Settings:
    def __init__(self, scale):
        self.scale = scale


def test_verify_catches_a_key_made_wrong_on_purpose(verifying, caplog):
    # A key that leaves out what the trace reads (all Settings keyed alike).
    stablejit.register_type(Settings, lambda s: "all the same")
    try:

        def run(settings, x):
            return stablejit.stable_jit(lambda x: x * settings.scale)(x)

        x = jnp.arange(3.0)
        np.testing.assert_allclose(run(Settings(2.0), x), 2 * x)
        np.testing.assert_allclose(run(Settings(5.0), x), 5 * x)
        assert stablejit.cache_info().mismatches == 1
        [message] = errors(caplog)
        assert "mul" in message and "2.0" in message and "5.0" in message
    finally:
        stablejit.register_type(Settings, "state")


@jax.custom_vjp
def clipped_sin(x):
    return jnp.sin(x)


clipped_sin.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (jnp.clip(g * jnp.cos(x), -1, 1),))


def test_a_hit_that_traces_the_same_program_runs_its_entry(verifying, traced):
    import _helpers

    def make(w):
        def f(x):
            _helpers.count_trace()
            # custom_vjp and custom_jvp: functions made anew per trace among their parameters
            return clipped_sin(x) * w + jax.nn.relu(x)

        return stablejit.stable_jit(f)

    x, w = jnp.arange(3.0), jnp.ones(3)
    for i in range(3):
        np.testing.assert_allclose(make(w * i)(x), jnp.sin(x) * i + jax.nn.relu(x), rtol=1e-6)
    info = stablejit.cache_info()
    # Two hits traced again and compared, the same: the entry stays, and its
    # counts are the cache's own (the user's code ran once per trace of either).
    assert (info.hits, info.verified, info.mismatches, info.entries) == (2, 2, 0, 1)
    assert info.traces == 1
    assert traced() == 3


def test_a_hit_with_new_shapes_is_traced_once_not_compared(verifying, traced):
    import _helpers

    def f(x):
        _helpers.count_trace()
        return x + 1

    g = stablejit.stable_jit(f)
    g(jnp.ones(2))
    g(jnp.ones(3))  # an entry hit whose shapes JAX has not traced: nothing to compare with
    assert (stablejit.cache_info().verified, traced()) == (0, 2)
    g(jnp.ones(3))
    assert (stablejit.cache_info().verified, traced()) == (1, 3)


def test_at_zero_entries_serve_their_jit_itself():
    # p = 0 costs nothing on the hit path: what every call function calls is
    # the entry's jax.jit, with no sampling in between.
    f = stablejit.stable_jit(lambda x: x * 2)
    f(jnp.ones(2))
    [entry] = cache.live_entries()
    assert entry.ready is entry.jitted
    stablejit.config.verify = 0.5
    try:
        assert entry.ready is not entry.jitted
        assert entry.ready.unsampled is entry.jitted
    finally:
        stablejit.config.verify = 0.0
    assert entry.ready is entry.jitted


def test_setting_verify_samples_entries_made_before(scale_env, caplog):
    x = jnp.arange(3.0)
    scaled_by_env()(x)
    scale_env(2)
    stablejit.config.verify = 1.0
    try:
        np.testing.assert_allclose(scaled_by_env()(x), 2 * x)
    finally:
        stablejit.config.verify = 0.0
    assert stablejit.cache_info().mismatches == 1


def test_hits_are_verified_with_probability_p(monkeypatch, verifying):
    draws = iter([0.9, 0.1, 0.6, 0.2])
    monkeypatch.setattr(verify, "SAMPLE", lambda: next(draws))
    verifying.verify = 0.5
    f = stablejit.stable_jit(lambda x: x - 1)
    for _ in range(5):
        f(jnp.ones(2))
    assert stablejit.cache_info().verified == 2  # the draws below 0.5


def test_verify_leaves_the_users_random_stream_alone(verifying):
    import random

    f = stablejit.stable_jit(lambda x: x * 3)
    random.seed(7)
    expected = [random.random() for _ in range(3)]
    random.seed(7)
    for _ in range(3):
        f(jnp.ones(2))
    assert [random.random() for _ in range(3)] == expected
    assert stablejit.cache_info().verified == 2


def test_verify_is_set_from_the_environment(monkeypatch):
    monkeypatch.setenv("STABLEJIT_VERIFY", "0.25")
    assert Config().verify == 0.25
    monkeypatch.setenv("STABLEJIT_VERIFY", "2")
    with pytest.raises(ValueError, match="STABLEJIT_VERIFY"):
        Config()


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "1"])
def test_verify_refuses_what_is_not_a_probability(bad):
    with pytest.raises((TypeError, ValueError)):
        stablejit.config.verify = bad
    assert stablejit.config.verify == 0.0


def test_the_canonical_form_ignores_names_and_compares_constants_by_bytes():
    def program(c):
        return lambda x: jnp.sin(x) * jnp.asarray(c) + 1.0

    x = jnp.ones(3)
    one = form(jax.make_jaxpr(program(np.arange(3.0)))(x))
    again = form(jax.make_jaxpr(program(np.arange(3.0)))(x))  # new variables, new constant objects
    other = form(jax.make_jaxpr(program(np.arange(3.0) + 1))(x))
    assert first_difference(one, again) is None
    line, was, now = first_difference(one, other)
    assert was != now and "#" in was  # the constants, by digest
    assert first_difference(one, one[:-1])[2] == "(none)"


def test_the_canonical_form_types_each_variable_once_where_it_is_defined():
    def lines(n):
        return form(jax.make_jaxpr(lambda x: jnp.sin(x) * x)(jnp.ones(n)))

    three = lines(3)
    assert three[0].endswith("v0:float32[3]") and three[1].endswith("] v0")  # typed once
    # The types are what tells these apart (the equations and their parameters are the same):
    assert first_difference(three, lines(4))[0] == 0


@pytest.mark.parametrize("turned_on", ["option", "environment"])
def test_the_pytest_plugin_fails_a_test_with_a_stale_hit(pytester, monkeypatch, turned_on):
    pytester.makepyfile(
        test_stale="""
        import os
        import jax.numpy as jnp
        import stablejit

        def make():
            return stablejit.stable_jit(lambda x: x * float(os.environ["SCALE"]))

        def test_stale(monkeypatch):
            monkeypatch.setenv("SCALE", "1")
            make()(jnp.ones(2))
            monkeypatch.setenv("SCALE", "2")
            assert float(make()(jnp.ones(2))[0]) == 2.0

        def test_fine():
            f = stablejit.stable_jit(lambda x: x + 1)
            f(jnp.ones(2)); f(jnp.ones(2))
        """
    )
    options = ["--stablejit-verify"] if turned_on == "option" else []
    if turned_on == "environment":
        monkeypatch.setenv("STABLEJIT_VERIFY", "1")
    result = pytester.runpytest_subprocess("-p", "stablejit.pytest", *options)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*stablejit verify mode found 1 stale hit*",
            "stablejit verify: 2 hits verified, 1 mismatches",
        ]
    )


def test_an_entry_whose_retrace_warned_is_sampled_once(verifying):
    # A retrace that warns re-serves the entry (replaying its warnings): a
    # hit is still checked once, not once per layer.
    import warnings

    def f(x):
        if x.shape[0] == 3:
            warnings.warn("three", UserWarning, stacklevel=1)
        return x * 2

    g = stablejit.stable_jit(f)
    g(jnp.ones(2))
    with pytest.warns(UserWarning, match="three"):
        g(jnp.ones(3))  # a retrace for new shapes, which warns
    verified = stablejit.cache_info().verified
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the check's trace warns again)
        np.testing.assert_allclose(g(jnp.ones(3)), 2 * np.ones(3))
    assert stablejit.cache_info().verified == verified + 1


def test_verify_checks_hits_with_static_arguments(verifying, scale_env):
    # The check traces the entry's own staging: static arguments boxed as the entry takes them.
    def make():
        def f(x, n):
            return x * n * float(os.environ["STABLEJIT_TEST_SCALE"])

        return stablejit.stable_jit(f, static_argnums=1)

    x = jnp.arange(3.0)
    make()(x, 2)
    np.testing.assert_allclose(make()(x, 2), 2 * x)
    assert (stablejit.cache_info().verified, stablejit.cache_info().mismatches) == (1, 0)
    scale_env(3)
    np.testing.assert_allclose(make()(x, 2), 6 * x)
    assert stablejit.cache_info().mismatches == 1


def test_the_cached_traces_form_is_written_once_and_only_for_that_trace():
    # A hit's cached jaxpr is the same object at every verified hit: its form
    # is remembered by identity. An id can be reused once a jaxpr is gone, so
    # a remembered form serves only the object it was written for.
    a = jax.make_jaxpr(lambda x: x + 1)(1.0)
    b = jax.make_jaxpr(lambda x: x * 2)(1.0)
    verify._FORMS.put(id(b), (weakref.ref(a), form(a)))  # a died, and b was made at its address
    assert verify._cached_form(b) == form(b) != form(a)
    assert verify._cached_form(b) is verify._cached_form(b)
