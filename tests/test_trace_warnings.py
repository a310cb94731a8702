"""Warnings issued at trace time are seen as under jax.jit, which traces every
new function object: a cache hit by a new function shows them again."""

import sys
import threading
import types
import warnings

import _helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablejit


def _validate(c):
    # A library's check of a concrete value, at trace time (numpyro's pattern).
    if float(np.sum(c)) > 0:
        warnings.warn("positive parameter", UserWarning, stacklevel=2)


def _model(jit, c):
    c = np.asarray(c, dtype=np.float32)

    def f(y):
        _helpers.count_trace()
        _validate(c)
        return y + c

    return jit(f)


def _shown(call, action="always"):
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter(action)
        call()
    return [str(w.message) for w in log]


@pytest.mark.parametrize("jit", [jax.jit, stablejit.stable_jit], ids=["jax.jit", "stable_jit"])
def test_each_new_function_sees_the_trace_time_warning(jit, traced):
    x = jnp.ones(3)
    shown = [_shown(lambda: _model(jit, [1, 2, 3])(x)) for _ in range(3)]
    assert shown == [["positive parameter"]] * 3
    assert _shown(lambda: _model(jit, [-1, -2, -3])(x)) == []
    if jit is stablejit.stable_jit:
        assert traced() == 2  # the hits replayed the warning without tracing


@pytest.mark.parametrize("jit", [jax.jit, stablejit.stable_jit], ids=["jax.jit", "stable_jit"])
def test_the_same_function_warns_again_only_when_it_retraces(jit, record_checks):
    f = _model(jit, [1, 2, 3])
    assert _shown(lambda: f(jnp.ones(3))) == ["positive parameter"]
    assert _shown(lambda: f(jnp.zeros(3))) == []
    assert _shown(lambda: f(jnp.ones((2, 3)))) == ["positive parameter"]  # new shapes


def test_a_replay_is_shown_once_per_location_under_the_default_filter():
    def run():
        for _ in range(3):
            _model(stablejit.stable_jit, [1, 2, 3])(jnp.ones(3))

    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("default")
        run()
        run()
    assert [str(w.message) for w in log] == ["positive parameter"]
    assert log[0].filename == __file__


def test_a_replay_raises_where_warnings_are_errors_as_a_retrace_would():
    _shown(lambda: _model(stablejit.stable_jit, [1, 2, 3])(jnp.ones(3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="positive parameter"):
            _model(stablejit.stable_jit, [1, 2, 3])(jnp.ones(3))
        with pytest.raises(UserWarning, match="positive parameter"):
            _model(jax.jit, [1, 2, 3])(jnp.ones(3))


def test_an_eager_loop_body_warns_on_every_call_as_lax_does():
    def body(c):
        def step(i, v):
            _validate(c)
            return v + c

        return step

    c = np.ones(3, np.float32)
    for loop in (jax.lax.fori_loop, stablejit.fori_loop):
        shown = [_shown(lambda f=loop: f(0, 3, body(c), jnp.zeros(3))) for _ in range(2)]
        assert shown == [["positive parameter"]] * 2, loop


def test_a_warning_of_another_thread_is_not_taken_for_the_traces():
    started, finish = threading.Event(), threading.Event()

    def other():
        started.wait()
        warnings.warn("from another thread", UserWarning, stacklevel=1)
        finish.set()

    def make():
        def f(y):
            started.set()
            finish.wait(10)
            return y + 1

        return f

    thread = threading.Thread(target=other)
    thread.start()
    with warnings.catch_warnings(record=True) as log:
        warnings.simplefilter("always")
        stablejit.stable_jit(make())(jnp.ones(3))
        thread.join()
        stablejit.stable_jit(make())(jnp.ones(3))  # a hit by a new function
    assert [str(w.message) for w in log] == ["from another thread"]


def test_recording_leaves_the_warnings_module_as_it_found_it():
    before = warnings._showwarnmsg
    _shown(lambda: _model(stablejit.stable_jit, [1, 2, 3])(jnp.ones(3)))
    assert warnings._showwarnmsg is before


def test_a_replay_looks_past_odd_entries_of_sys_modules(monkeypatch):
    class Lazy(types.ModuleType):
        def __getattr__(self, name):
            raise RuntimeError(f"a lazy module imported {name}")

    monkeypatch.setitem(sys.modules, "_stablejit_test_lazy", Lazy("_stablejit_test_lazy"))
    monkeypatch.setitem(sys.modules, "_stablejit_test_object", object())
    # Issued from a file no module was loaded from: every entry is looked at.
    source = "def check():\n    warnings.warn('from no module', UserWarning, stacklevel=1)\n"
    namespace = {"warnings": warnings}
    exec(compile(source, "<no module>", "exec"), namespace)  # noqa: S102
    check = namespace["check"]

    def make():
        def f(y):
            check()
            return y + 1

        return stablejit.stable_jit(f)

    assert _shown(lambda: make()(jnp.ones(3))) == ["from no module"]
    assert _shown(lambda: make()(jnp.ones(3))) == ["from no module"]


def _warn_then(g, y):
    warnings.warn("checked at trace time", UserWarning, stacklevel=1)
    return g(y)


def _fresh_scale(k):
    def scale(y):
        return y * k

    return scale


@pytest.mark.parametrize("jit", [jax.jit, stablejit.stable_jit], ids=["jax.jit", "stable_jit"])
def test_a_fresh_static_callable_sees_the_trace_time_warning(jit, record_checks):
    solve = jit(_warn_then, static_argnums=0)
    x = jnp.ones(3)
    same = _fresh_scale(2.0)
    # Each fresh closure is a new static argument to jax.jit: a trace, a warning.
    assert _shown(lambda: solve(same, x)) == ["checked at trace time"]
    assert _shown(lambda: solve(_fresh_scale(2.0), x)) == ["checked at trace time"]
    assert _shown(lambda: solve(_fresh_scale(2.0), x)) == ["checked at trace time"]
    assert _shown(lambda: solve(same, x)) == []  # seen before: a hit under both
    np.testing.assert_allclose(solve(same, x), 2 * x)


class _Scaler:
    def __init__(self, k):
        self.k = k

    def apply(self, y):
        return y * self.k


@pytest.mark.parametrize("jit", [jax.jit, stablejit.stable_jit], ids=["jax.jit", "stable_jit"])
def test_a_bound_method_made_again_is_the_same_static_argument(jit, record_checks):
    solve = jit(_warn_then, static_argnums=0)
    scaler = _Scaler(3.0)
    x = jnp.ones(3)
    assert _shown(lambda: solve(scaler.apply, x)) == ["checked at trace time"]
    # A new bound method object, equal to the last: jax.jit's cache hits.
    assert _shown(lambda: solve(scaler.apply, x)) == []
    assert _shown(lambda: solve(_Scaler(3.0).apply, x)) == ["checked at trace time"]


@pytest.mark.parametrize("jit", [jax.jit, stablejit.stable_jit], ids=["jax.jit", "stable_jit"])
def test_a_fresh_callable_in_a_static_pytree_structure_sees_the_warning(jit, record_checks):
    # A static argument holding a pytree structure whose auxiliary data is a closure.
    def solve(static, y):
        (treedef,) = static
        (g,) = jax.tree_util.tree_leaves(treedef.node_data()[1])
        return _warn_then(g, y)

    solve = jit(solve, static_argnums=0)
    x = jnp.ones(3)

    def structure(g):
        return (jax.tree_util.tree_structure(jax.tree_util.Partial(g)),)

    assert _shown(lambda: solve(structure(_fresh_scale(2.0)), x)) == ["checked at trace time"]
    assert _shown(lambda: solve(structure(_fresh_scale(2.0)), x)) == ["checked at trace time"]


@pytest.mark.parametrize("jit", [jax.jit, stablejit.stable_jit], ids=["jax.jit", "stable_jit"])
def test_a_fresh_callable_in_an_arguments_structure_sees_the_warning(jit, record_checks):
    # jax.tree_util.Partial holds its function as auxiliary data: compared by identity.
    solve = jit(lambda p, y: _warn_then(p, y))
    x = jnp.ones(3)
    for _ in range(4):
        assert _shown(lambda: solve(jax.tree_util.Partial(_fresh_scale(2.0)), x)) == [
            "checked at trace time"
        ]
    same = jax.tree_util.Partial(_fresh_scale(2.0))
    assert _shown(lambda: solve(same, x)) == ["checked at trace time"]
    assert _shown(lambda: solve(same, x)) == []


@pytest.mark.parametrize("jit", [jax.jit, stablejit.stable_jit], ids=["jax.jit", "stable_jit"])
def test_a_new_function_that_also_retraces_shows_the_warning_once(jit, record_checks):
    # The replay for the new function and the retrace for new shapes are one call.
    assert _shown(lambda: _model(jit, [1, 2, 3])(jnp.ones(3))) == ["positive parameter"]
    assert _shown(lambda: _model(jit, [1, 2, 3])(jnp.ones((2, 3)))) == ["positive parameter"]
