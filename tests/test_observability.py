"""Why did it recompile: explanations, counters, the recompile limit, descriptions."""

import functools
import logging
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablejit
from stablejit import stable_jit
from stablejit._diagnostics import explain as _explain

SCALE = 2.0


def helper(x):
    return x + 1


def _make(k, params=None, n=3):
    def inner(x, m=n):
        out = x * k * SCALE + helper(x) * m
        return out + (params["w"].sum() if params else 0.0)

    return stable_jit(inner)


def test_closure_variable_change_is_named_with_old_and_new_value(explained):
    _make(2.0)(jnp.ones(2))
    _make(3.0)(jnp.ones(2))
    (msg,) = explained()
    assert "stable_jit(_make.<locals>.inner) at test_observability.py:" in msg
    assert msg.endswith("retraced: closure variable 'k' changed 2.0 → 3.0")


def test_global_rebinding_is_named(explained):
    global SCALE
    _make(2.0)(jnp.ones(2))
    SCALE = 5.0
    try:
        _make(2.0)(jnp.ones(2))
    finally:
        SCALE = 2.0
    assert explained()[-1].endswith("global 'SCALE' was rebound: 2.0 → 5.0")


def test_default_argument_change_is_named(explained):
    _make(2.0, n=3)(jnp.ones(2))
    _make(2.0, n=4)(jnp.ones(2))
    assert explained()[-1].endswith("default argument 'm' changed 3 → 4")


def test_tree_structure_change_names_the_new_key(explained):
    _make(2.0, {"w": jnp.ones(2)})(jnp.ones(2))
    _make(2.0, {"w": jnp.ones(2), "v": 1})(jnp.ones(2))
    assert explained()[-1].endswith("closure variable 'params': structure changed (new key 'v')")


def test_code_change_of_a_global_function_is_named(explained):
    global helper
    _make(2.0)(jnp.ones(2))
    old = helper
    helper = lambda x: x - 1  # noqa: E731
    try:
        _make(2.0)(jnp.ones(2))
    finally:
        helper = old
    assert explained()[-1].endswith("global 'helper': code changed")


def test_argument_shape_change_is_named(explained):
    f = _make(2.0)
    f(jnp.ones(2))
    f(jnp.ones((2, 3)))
    assert explained()[-1].endswith("argument 0 ('x'): float32[2] → float32[2,3]")


def test_lifted_array_shape_change_is_named(explained):
    _make(2.0, {"w": jnp.ones(2)})(jnp.ones(2))
    _make(2.0, {"w": jnp.ones(3)})(jnp.ones(2))
    assert explained()[-1].endswith("closure variable 'params'['w']: float32[2] → float32[3]")


def test_static_keyword_argument_change_is_named(explained):
    f = stable_jit(lambda x, *, n: x * n, static_argnames="n")
    f(jnp.ones(1), n=2)
    f(jnp.ones(1), n=3)
    assert explained()[-1].endswith("static argument 'n' changed 2 → 3")


def test_hits_log_nothing_and_describe_nothing(explained, monkeypatch):
    calls = []
    real = _explain.describe
    monkeypatch.setattr(_explain, "describe", lambda fn: calls.append(fn) or real(fn))
    for _ in range(5):
        _make(2.0)(jnp.ones(2))
    assert len(calls) == 1
    assert explained() == []


def test_explanations_off_log_nothing(caplog):
    caplog.set_level(logging.DEBUG, logger="stablejit")
    _make(2.0)(jnp.ones(2))
    _make(3.0)(jnp.ones(2))
    assert [r for r in caplog.records if r.name == "stablejit"] == []


def test_cache_info_counts_hits_misses_traces_compiles():
    for k in (1.0, 1.0, 2.0, 1.0):
        _make(k)(jnp.ones(2))
    _make(1.0)(jnp.ones(3))  # a retrace within an entry: new argument shape
    f = _make(1.0)
    info = f.cache_info()
    assert (info.hits, info.misses, info.traces, info.compiles, info.entries) == (3, 2, 3, 3, 2)
    assert info.trace_seconds > 0 and info.compile_seconds > 0
    assert stablejit.num_traces(f) == 3
    assert stablejit.cache_info(f) == info
    assert stablejit.cache_info().misses >= 2


def test_cache_info_counts_each_xla_compile_once():
    # The count comes from JAX's compile event (its name in _diagnostics/events.py):
    # under a name JAX no longer sends it would stay 0, and eviction, which weighs
    # entries by their compiles, would weigh each as 1.
    f = stable_jit(lambda x: x * 3)
    f(jnp.ones(2))
    assert stablejit.cache_info(f).compiles == 1
    f(jnp.ones(2))  # a hit: nothing compiled
    assert stablejit.cache_info(f).compiles == 1
    f(jnp.ones(3))  # a new shape: compiled again
    assert stablejit.cache_info(f).compiles == 2


def test_cache_info_counts_the_hits_of_the_fast_path_too():
    # A redefined closure's calls are served by its record's call function
    # (in C where the accelerator is built) once it is compiled: each is a hit.
    for _ in range(30):
        _make(1.0)(jnp.ones(2))
    info = _make(1.0).cache_info()
    assert (info.hits, info.misses, info.traces) == (29, 1, 1)
    assert stablejit.cache_info(_make(1.0)) == info  # a fresh wrapper reads the same counters


def test_cache_info_counts_evictions_and_keeps_counts_of_dropped_entries():
    stablejit.config.cache_size = 1
    for k in (1.0, 2.0, 1.0):
        _make(k)(jnp.ones(2))
    info = _make(1.0).cache_info()
    assert (info.misses, info.traces, info.entries, info.evictions) == (3, 3, 1, 2)


def test_clear_cache_resets_counters():
    _make(1.0)(jnp.ones(2))
    stablejit.clear_cache()
    assert stablejit.cache_info() == stablejit.CacheInfo(0, 0, 0, 0, 0, 0, 0.0, 0.0)


@pytest.mark.parametrize("call", [stablejit.cache_info, stablejit.num_traces])
def test_counters_of_a_plain_function_are_a_type_error(call):
    with pytest.raises(TypeError, match="stable_jit"):
        call(lambda x: x)


def test_recompile_limit_warns_once_naming_what_changes(limit):
    limit.recompile_limit, limit.on_recompile_limit = 3, "warn"
    with pytest.warns(stablejit.RecompileLimitWarning) as record:
        for k in range(6):
            np.testing.assert_array_equal(_make(k * 0.5)(jnp.ones(1)), [k * 0.5 * 2 + 2 * 3])
    assert len(record) == 1
    msg = str(record[0].message)
    assert "has compiled 4 distinct variants (config.recompile_limit=3)" in msg
    assert "closure variable 'k' took 4 distinct values (0.0, 0.5, 1.0, 1.5)" in msg
    assert "make it an array, or pass lift_scalars=True, to lift it" in msg
    assert record[0].filename == __file__
    assert _make(0.0).cache_info().entries == 6


def test_recompile_limit_raise(limit):
    limit.recompile_limit, limit.on_recompile_limit = 2, "raise"
    _make(1.0)(jnp.ones(1))
    _make(2.0)(jnp.ones(1))
    with pytest.raises(stablejit.RecompileLimitError, match="closure variable 'k' took 3"):
        _make(3.0)(jnp.ones(1))
    _make(1.0)(jnp.ones(1))  # known variants still run


def test_recompile_limit_fallback_runs_uncached_and_correct(limit, caplog):
    limit.recompile_limit, limit.on_recompile_limit = 2, "fallback"
    for k in range(5):
        np.testing.assert_array_equal(_make(float(k))(jnp.ones(1)), [k * 2 + 6])
    notices = [r.getMessage() for r in caplog.records if r.name == "stablejit"]
    assert len(notices) == 1 and "plain jax.jit, uncached" in notices[0]
    assert _make(0.0).cache_info().entries == 2
    lowered = _make(9.0).lower(jnp.ones(1))
    np.testing.assert_array_equal(lowered.compile()(jnp.ones(1)), [24.0])


def test_describe_lists_lifted_and_static_parts_in_user_names():
    w = jnp.ones((3, 4))
    cfg = {"act": "tanh", "depth": 2}

    def f(x):
        return x @ w * cfg["depth"] * SCALE

    d = stablejit.describe(stable_jit(f))
    assert d.lifted == [("closure variable 'w'", "float32[3,4]")]
    static = dict(d.static)
    assert static["global 'SCALE'"] == "2.0"
    assert static["closure variable 'cfg'['act']"] == "'tanh'"
    text = str(d)
    assert text.startswith("stable_jit key of test_describe_lists_lifted_and_static_parts")
    assert "closure variable 'w': float32[3,4]  (lifted)" in text


def test_describe_walks_partials_methods_and_nested_functions():
    class M:
        def __init__(self):
            self.w = jnp.ones(2)

        def apply(self, x, k):
            return x * self.w * k

    d = stablejit.describe(functools.partial(M().apply, k=3))
    names = [name for name, _ in d.lifted + d.static]
    assert "partial of → self.w" in names
    assert "partial keyword 'k'" in names


@pytest.mark.parametrize(
    "name,value,error",
    [
        ("explain_misses", 1, TypeError),
        ("recompile_limit", 0, ValueError),
        ("recompile_limit", 2.0, TypeError),
        ("on_recompile_limit", "ignore", ValueError),
    ],
)
def test_bad_config_values_name_the_setting(name, value, error):
    with pytest.raises(error, match=name):
        setattr(stablejit.config, name, value)


def test_config_reads_the_environment(monkeypatch):
    monkeypatch.setenv("STABLEJIT_EXPLAIN_MISSES", "1")
    monkeypatch.setenv("STABLEJIT_RECOMPILE_LIMIT", "3")
    monkeypatch.setenv("STABLEJIT_ON_RECOMPILE_LIMIT", "raise")
    c = type(stablejit.config)()
    assert (c.explain_misses, c.recompile_limit, c.on_recompile_limit) == (True, 3, "raise")
    monkeypatch.setenv("STABLEJIT_RECOMPILE_LIMIT", "many")
    with pytest.raises(ValueError, match="STABLEJIT_RECOMPILE_LIMIT"):
        type(stablejit.config)()


def test_recompile_limit_by_default_logs_once_and_never_warns(limit, caplog):
    limit.recompile_limit = 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as suites run with -W error
        for k in range(5):
            np.testing.assert_array_equal(_make(float(k))(jnp.ones(1)), [k * 2 + 6])
    notices = [r for r in caplog.records if r.name == "stablejit"]
    assert len(notices) == 1 and notices[0].levelno == logging.WARNING
    assert "closure variable 'k' took 3 distinct values" in notices[0].getMessage()


def _shared_body(model):
    """Library-style code: one closure, over whichever callable it is given."""

    def body(x):
        return model(x) + 1.0

    return body


def test_distinct_callables_sharing_one_closure_are_not_counted_as_recompiles(limit, caplog):
    limit.recompile_limit, limit.on_recompile_limit = 2, "raise"
    models = [
        lambda x: x * 2.0,
        lambda x: x - 3.0,
        lambda x: jnp.sin(x),
        functools.partial(jnp.power, 2.0),
        jnp.cos,
    ]
    x = jnp.ones(2)
    for model in models:  # each a new structure: never "one function recompiling"
        np.testing.assert_allclose(stable_jit(_shared_body(model))(x), model(x) + 1.0)
    assert stable_jit(_shared_body(jnp.cos)).cache_info().misses == len(models)
    with pytest.raises(stablejit.RecompileLimitError, match="lambda.*took 3 distinct"):
        for k in range(3):  # one structure, a value that keeps changing
            stable_jit(_shared_body(lambda x, k=float(k): x * k))(x)


def _grad_step(temp, x):
    def loss(w):
        return jnp.sum(w * x) * temp

    return stable_jit(jax.grad(loss))


def test_a_function_wrapped_by_jax_grad_is_named_with_its_own_file_and_line(explained):
    x = jnp.ones(2)
    for temp in (1.0, 2.0):
        np.testing.assert_allclose(_grad_step(temp, x)(x), temp * x)
    (msg,) = explained()
    line = _grad_step.__code__.co_firstlineno + 1
    assert msg.startswith(f"stable_jit(_grad_step.<locals>.loss) at test_observability.py:{line}")
    # The path through jax.grad's own closures ('fun', 'value_and_grad_f') is collapsed.
    assert msg.endswith("retraced: closure variable 'temp' changed 1.0 → 2.0")


def test_vmap_of_a_partial_is_named_by_the_partial_and_its_function(explained):
    def step(temp):
        def loss(w, t):
            return w * t * temp

        return stable_jit(jax.vmap(functools.partial(loss, t=3.0)))

    for temp in (1.0, 2.0):
        np.testing.assert_allclose(step(temp)(jnp.ones(2)), [3.0 * temp] * 2)
    (msg,) = explained()
    assert "stable_jit(partial(" in msg and "step.<locals>.loss)) at test_observability.py:" in msg
    assert msg.endswith("partial of → closure variable 'temp' changed 1.0 → 2.0")


def test_distinct_functions_under_jax_grad_are_counted_apart():
    def loss_a(w):
        return jnp.sum(w)

    def loss_b(w):
        return jnp.sum(w * w)

    a, b = stable_jit(jax.grad(loss_a)), stable_jit(jax.grad(loss_b))
    a(jnp.ones(2))
    b(jnp.ones(2))
    assert a.cache_info().misses == 1 and b.cache_info().misses == 1


def test_a_part_reached_only_through_library_closures_is_still_named():
    from stablejit._diagnostics.describe import HIDDEN, render

    assert render((f"{HIDDEN}wrap: closure variable 'fun'", "closure variable 'k'")) == (
        "closure variable 'k'"
    )
    # The part that changed is named even when everything above it is hidden.
    assert render((f"{HIDDEN}wrap: closure variable 'noise'",)) == (
        "wrap: closure variable 'noise'"
    )
