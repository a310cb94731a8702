"""stable_jit behaves as jax.jit where a user can observe it: what wrapping
refuses and with which message, which arguments are static, the attributes the
wrapper wears, disable_jit, what it keeps alive, where errors point, and the
jax.stages objects of its ahead-of-time path."""

import functools
import gc
import traceback
import typing
import warnings
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import wraps_through

from stablejit import stable_jit


def _error_of(thunk) -> tuple[type, str]:
    with pytest.raises(Exception) as info:
        thunk()
    return type(info.value), str(info.value)


def _gen(x):
    yield x


@pytest.mark.parametrize(
    "fun",
    [3, "f", jnp.ones(2), _gen, staticmethod(lambda x: x)],
    ids=["int", "str", "array", "generator", "staticmethod"],
)
def test_wrapping_refuses_what_jax_jit_refuses_with_its_message(fun):
    assert _error_of(lambda: stable_jit(fun)) == _error_of(lambda: jax.jit(fun))


def test_a_coroutine_function_is_wrapped_and_its_call_fails_as_under_jax_jit():
    async def co(x):
        return x

    def failure(jit):
        wrapped = jit(co)  # wrapping is fine, as for jax.jit
        with warnings.catch_warnings():  # (the coroutine a call made, never awaited)
            warnings.simplefilter("ignore", RuntimeWarning)
            try:
                wrapped(1.0)
            except Exception as e:  # noqa: BLE001 - whatever jax.jit raises
                return type(e)
            finally:
                gc.collect()
        return None

    assert failure(stable_jit) is failure(jax.jit) is not None


@pytest.mark.parametrize(
    "options",
    [
        {"static_argnums": 2},
        {"static_argnums": (0, 5)},
        {"static_argnames": "z"},
        {"donate_argnames": "z"},
        {"static_argnames": "x", "donate_argnames": "x"},
        {"static_argnums": 0, "donate_argnums": 0},
    ],
)
def test_argument_numbers_and_names_are_checked_when_wrapping_as_jax_jit_does(options):
    def f(x, y):
        return x + y

    expected = _error_of(lambda: jax.jit(f, **options))
    assert _error_of(lambda: stable_jit(f, **options)) == expected
    # Twice: the check is remembered per code, not skipped the second time.
    assert _error_of(lambda: stable_jit(f, **options)) == expected


def test_wrappers_sharing_one_code_are_checked_each_by_its_own_signature():
    # functools.wraps and jax.named_call give every wrapper one code; the
    # check remembered for one must not pass another that lacks the name.
    stable_jit(wraps_through(lambda x, y: x), static_argnames="x")
    expected = _error_of(lambda: jax.jit(wraps_through(lambda a, y: a), static_argnames="x"))
    assert (
        _error_of(lambda: stable_jit(wraps_through(lambda a, y: a), static_argnames="x"))
        == expected
    )


def test_valid_argument_numbers_and_names_wrap_and_run():
    def f(x, y, *, z):
        return x * y + z

    g = stable_jit(f, static_argnums=1, static_argnames="z", donate_argnums=0)
    np.testing.assert_array_equal(g(jnp.ones(2), 3, z=1), [4.0, 4.0])


def test_empty_static_argnames_beside_argnums_leaves_keyword_uses_traced(traces):
    def f(x, y):
        traces()
        return x + y

    for options in ({"static_argnums": 1, "static_argnames": ()}, {"static_argnums": 1}):
        expected = jax.jit(f, **options)(1, y=2)
        assert stable_jit(f, **options)(1, y=2) == expected == 3
    g = stable_jit(f, static_argnums=1, static_argnames=())
    traces.n = 0
    for y in range(3):
        assert g(1, y=y) == 1 + y
    assert traces.n == 1  # y by keyword is an input: one trace for all its values


def test_cache_size_counts_compiled_variants_as_jax_jits_does(traces):
    def f(x, flag):
        traces()
        return x * 2 if flag else x

    stock, ours = jax.jit(f, static_argnums=1), stable_jit(f, static_argnums=1)
    assert ours._cache_size() == stock._cache_size() == 0
    for flag in (True, True, False):
        assert ours(jnp.arange(3.0), flag).tolist() == stock(jnp.arange(3.0), flag).tolist()
    assert ours._cache_size() == stock._cache_size() == 2
    assert traces.n == 4  # two variants, each traced once by each


def test_under_disable_jit_each_call_runs_the_python_body_once():
    runs = []

    def f(x):
        runs.append(x)
        return x * 2

    with jax.disable_jit():
        assert stable_jit(f)(3) == 6
        assert len(runs) == 1
        assert stable_jit(f)(4) == 8
    assert len(runs) == 2
    assert stable_jit(f)(jnp.float32(5)) == 10  # compiled: traced once
    assert len(runs) == 3
    with jax.disable_jit():  # a compiled entry, run as Python
        assert stable_jit(f)(jnp.float32(6)) == 12
    assert len(runs) == 4


def _documented(x: jax.Array, n: int = 2) -> jax.Array:
    """Doubles, n times."""
    return x * n


class _Scaler:
    def __call__(self, x):
        return x * 3


@pytest.mark.parametrize(
    "fun",
    [_documented, functools.partial(_documented, n=3), _Scaler()],
    ids=["function", "partial", "callable object"],
)
def test_the_wrapper_wears_what_jax_jit_wraps_onto_its_own(fun):
    names = ("__wrapped__", "__name__", "__qualname__", "__doc__", "__module__", "__annotations__")
    ours, theirs = stable_jit(fun), jax.jit(fun)
    for name in names:
        assert getattr(ours, name) == getattr(theirs, name), name
    theirs_copied = {k: v for k, v in vars(theirs).items() if k not in ("_fun", "_jit_info")}
    assert vars(ours) == theirs_copied


def test_attributes_of_the_function_are_read_through_the_wrapper():
    def f(x: int) -> int:
        return x

    f.marker = "set on f"
    g = stable_jit(f)
    assert g.marker == jax.jit(f).marker == "set on f"
    assert (
        typing.get_type_hints(g) == typing.get_type_hints(jax.jit(f)) == {"x": int, "return": int}
    )
    g.own = 1  # set on the wrapper: its own
    assert g.own == vars(g)["own"] == 1
    assert not hasattr(f, "own")
    with pytest.raises(AttributeError):
        g.missing  # noqa: B018


def test_the_wrapper_class_keeps_its_own_docstring_and_module():
    from stablejit import StableJitted

    assert StableJitted.__module__ == "stablejit._runtime.jitted"
    assert StableJitted.__doc__.startswith("A callable compiled like ``jax.jit``")


@pytest.mark.parametrize(
    "wrap", [lambda f: f, functools.partial, lambda f: functools.partial(functools.partial(f))]
)
def test_getstate_names_the_function_as_jax_jit_does(wrap):
    def my_function():
        return

    fun = wrap(my_function)
    state = stable_jit(fun).__getstate__()
    assert state["function_name"] == jax.jit(fun).__getstate__()["function_name"] == "my_function"


def _add(y, b):
    return y + b


def _function_over_an_array(jit, how, calls):
    a = jnp.arange(4.0)
    alive = weakref.ref(a)

    def f(y):
        return y + a

    def with_default(y, b=a):
        return y + b

    fun = {"closure": f, "default": with_default, "partial": functools.partial(_add, b=a)}[how]
    g = jit(fun)
    for y in calls:
        g(y)
    return alive


@pytest.mark.parametrize(
    "calls", [[1.0], [1.0, 2.0], [1.0, jnp.ones(4)]], ids=["first", "hit", "new shapes"]
)
@pytest.mark.parametrize("how", ["closure", "default", "partial"])
@pytest.mark.parametrize("jit", [jax.jit, stable_jit], ids=["jax.jit", "stable_jit"])
def test_an_array_a_function_holds_is_freed_once_the_function_is_dropped(jit, how, calls):
    gc.collect()
    gc.disable()  # freed by reference counting, as under jax.jit: no cycle holds it
    try:
        alive = _function_over_an_array(jit, how, calls)
        assert alive() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("array", [jnp.ones(2), np.ones(2)], ids=["jax", "numpy"])
@pytest.mark.parametrize("how", ["argnums", "argnames"])
def test_an_array_passed_as_a_static_argument_is_refused_as_by_jax_jit(array, how):
    def f(x, s):
        return x

    options = {"static_argnums": 1} if how == "argnums" else {"static_argnames": "s"}
    expected = _error_of(lambda: jax.jit(f, **options)(1.0, array))
    assert expected[0] is ValueError
    assert _error_of(lambda: stable_jit(f, **options)(1.0, array)) == expected
    assert _error_of(lambda: stable_jit(f, **options)(1.0, s=array)) == expected


def test_an_object_whose_attributes_cannot_be_read_is_closed_over_as_under_jax_jit(traces):
    class Guarded:
        def __getattribute__(self, name):
            raise RuntimeError("no attribute access")

    guarded = Guarded()

    def f(x):
        traces()
        return (guarded, x)[1] * 2

    g = stable_jit(f)
    assert [g(x) for x in (1.0, 2.0)] == [2.0, 4.0]
    assert traces.n == 1  # keyed by identity, and hit
    assert [jax.jit(f)(x) for x in (1.0, 2.0)] == [2.0, 4.0]


def _returns_no_array(x):
    return object()


class _ReturnsNoArray:
    def __call__(self, x):
        return object()


@pytest.mark.parametrize(
    "fun",
    [_returns_no_array, functools.partial(_returns_no_array), _ReturnsNoArray()],
    ids=["function", "partial", "callable object"],
)
def test_a_non_jax_return_value_is_reported_as_under_jax_jit(fun):
    expected = _error_of(lambda: jax.jit(fun)(1.0))
    if not isinstance(fun, _ReturnsNoArray):
        assert "_returns_no_array at " + __file__ in expected[1]
    assert _error_of(lambda: stable_jit(fun)(1.0)) == expected


def _frames(thunk) -> list[tuple[str, str]]:
    with pytest.raises(ZeroDivisionError) as info:
        thunk()
    return [(f.filename, f.name) for f in traceback.extract_tb(info.value.__traceback__)]


def _fails(x):
    return 1 // 0


@pytest.fixture
def traceback_filtering():
    old = jax.config.jax_traceback_filtering
    yield lambda mode: jax.config.update("jax_traceback_filtering", mode)
    jax.config.update("jax_traceback_filtering", old)


@pytest.mark.parametrize("when", ["first call", "new shapes"])
def test_a_users_error_shows_the_users_frames_as_under_jax_jit(
    when, traceback_filtering, record_checks
):
    def run(jit):
        f = jit(lambda x: _fails(x) if x.ndim else x)
        if when == "new shapes":
            for _ in range(3):  # past the records' compilation
                f(jnp.float32(1.0))
        return _frames(lambda: f(jnp.ones(2)))

    frames = run(stable_jit)
    assert frames == run(jax.jit)
    assert not any("stablejit" in filename for filename, _ in frames)
    # Only when JAX filters: with its filtering off, stablejit's frames are there.
    traceback_filtering("off")
    assert any("stablejit" in filename for filename, _ in run(stable_jit))


def test_an_error_in_lower_shows_the_users_frames_as_under_jax_jit():
    def run(jit):
        return _frames(lambda: jit(lambda x: _fails(x)).lower(jnp.ones(2)))

    assert run(stable_jit) == run(jax.jit)


def _closure_over(a):
    def f(x, scale=1.0):
        return {"y": x * a * scale}

    return f


@pytest.mark.parametrize("jit", [jax.jit, stable_jit], ids=["jax.jit", "stable_jit"])
def test_trace_lower_and_compile_give_jax_stages_of_the_users_arguments(jit):
    a, x = jnp.arange(3.0), jnp.ones(3)
    f = jit(_closure_over(a))
    traced = f.trace(x, scale=2.0)
    lowered = f.lower(x, scale=2.0)
    compiled = lowered.compile()
    assert isinstance(traced, jax.stages.Traced)
    assert isinstance(traced.lower(), jax.stages.Lowered)
    assert isinstance(lowered, jax.stages.Lowered)
    assert isinstance(compiled, jax.stages.Compiled)
    reference = jax.jit(_closure_over(a))
    expected = reference.lower(x, scale=2.0).compile()
    for stage in (traced, lowered, compiled):
        assert stage.in_tree == expected.in_tree
        assert stage.in_avals == expected.in_avals
    assert compiled.input_shardings == expected.input_shardings
    np.testing.assert_array_equal(compiled(x, scale=2.0)["y"], [0.0, 2.0, 4.0])
    if callable(reference.trace(x, scale=2.0)):  # (a Traced is called from JAX 0.7 on)
        np.testing.assert_array_equal(traced(x, scale=2.0)["y"], [0.0, 2.0, 4.0])
    assert f.eval_shape(x, scale=2.0) == reference.eval_shape(x, scale=2.0)


def test_lowering_then_calling_traces_once(traces):
    a = jnp.arange(3.0)

    def f(x):
        traces()
        return x + a

    g = stable_jit(f)
    g.lower(jnp.ones(3)).compile()
    g.eval_shape(jnp.ones(3))
    np.testing.assert_array_equal(g(jnp.ones(3)), [1.0, 2.0, 3.0])
    assert traces.n == 1


def test_a_compiled_static_variant_takes_the_dynamic_arguments_only():
    g = stable_jit(lambda x, n: x * n, static_argnums=1)
    compiled = g.lower(jnp.ones(2), 3).compile()
    expected = jax.jit(lambda x, n: x * n, static_argnums=1).lower(jnp.ones(2), 3).compile()
    assert compiled.in_tree == expected.in_tree
    np.testing.assert_array_equal(compiled(jnp.ones(2)), [3.0, 3.0])


def test_equinox_aot_through_patched_jax_jit_gets_jax_stages():
    eqx = pytest.importorskip("equinox")
    import stablejit

    a = jnp.arange(3.0)

    def f(x):
        return x + a

    with stablejit.patch():
        lowered = eqx.filter_jit(f).lower(jnp.ones(3))
        compiled = lowered.compile()
    assert isinstance(lowered.lowered, jax.stages.Lowered)  # equinox's field types
    assert isinstance(compiled.compiled, jax.stages.Compiled)
    np.testing.assert_array_equal(compiled(jnp.ones(3)), [1.0, 2.0, 3.0])


class _Shown:
    def __call__(self, x):
        return x + 1

    def __repr__(self):
        return "<a shown callable>"


class _Unshowable:
    def __call__(self, x):
        return x + 1

    def __repr__(self):
        raise RuntimeError("no repr")


@pytest.mark.parametrize(
    "fun", [_add, functools.partial(_add, b=1.0), _Shown()], ids=["function", "partial", "object"]
)
def test_the_repr_is_jax_jits(fun):
    assert repr(stable_jit(fun)) == repr(jax.jit(fun)) == f"<PjitFunction of {fun!r}>"


def test_the_repr_falls_back_as_jax_jits_when_the_function_cannot_be_shown():
    assert repr(stable_jit(_Unshowable())) == repr(jax.jit(_Unshowable())) == "<PjitFunction>"
    ours, theirs = stable_jit(_add), jax.jit(_add)
    del ours.__wrapped__, theirs.__wrapped__
    assert repr(ours) == repr(theirs) == "<PjitFunction>"


@pytest.mark.parametrize("jit", [jax.jit, stable_jit], ids=["jax.jit", "stable_jit"])
def test_what_the_wrapper_wears_can_be_replaced_and_deleted_as_on_jax_jits(jit):
    g = jit(_add)
    g.__wrapped__ = _documented
    assert g.__wrapped__ is vars(g)["__wrapped__"] is _documented
    del g.__name__, g.__wrapped__
    assert not hasattr(g, "__name__") and not hasattr(g, "__wrapped__")
    assert "__name__" not in vars(g) and "__wrapped__" not in vars(g)
    assert g.__qualname__ == "_add"  # the rest stays
    assert g(1.0, 2.0) == 3.0  # and the wrapper still calls the function it was given


def test_a_new_wrapper_wears_everything_after_one_that_lost_an_attribute_is_dropped():
    # Wrappers are made and dropped per call of a function that jits inside
    # (their memory reused): which ones hold their own attributes follows the
    # object, not where it lives.
    for _ in range(3):
        g = stable_jit(_add)
        assert g.__name__ == "_add" and g.__wrapped__ is _add
        del g.__name__
        del g


class _NoWeakReferences:
    __slots__ = ()

    def __call__(self, x):
        return x * 2


def test_a_callable_without_weak_references_wraps_but_its_calls_fail_as_under_jax_jit():
    fun = _NoWeakReferences()
    expected = _error_of(lambda: weakref.ref(fun))
    assert expected[0] is TypeError
    ours, theirs = stable_jit(fun), jax.jit(fun)  # wrapping is fine
    for _ in range(2):  # every call: nothing was cached by the first
        assert _error_of(lambda: ours(1.0)) == _error_of(lambda: theirs(1.0)) == expected
    assert _error_of(lambda: ours.lower(1.0)) == _error_of(lambda: theirs.lower(1.0))
    assert _error_of(lambda: ours.trace(1.0)) == expected
    with jax.disable_jit():  # no trace cache: the function just runs
        assert ours(1.0) == theirs(1.0) == 2.0


class _HashFails:
    def __hash__(self):
        raise LookupError("this value has no hash")


def test_an_error_a_static_arguments_hash_raises_propagates_as_under_jax_jit():
    def f(x, s):
        return x + 1

    expected = _error_of(lambda: jax.jit(f, static_argnums=1)(1.0, _HashFails()))
    assert expected == (LookupError, "this value has no hash")
    g = stable_jit(f, static_argnums=1)
    for _ in range(2):  # every call: a value whose hash fails never reaches the cache
        assert _error_of(lambda: g(1.0, _HashFails())) == expected


class _EqualityFails:
    """A class written to be a key (its own __eq__ and __hash__), whose
    __eq__ raises: stablejit keys it by that equality, as jax.jit does."""

    def __hash__(self):
        return 7

    def __eq__(self, other):
        raise ArithmeticError("cannot compare")


@pytest.mark.parametrize("jit", [jax.jit, stable_jit], ids=["jax.jit", "stable_jit"])
def test_a_static_argument_whose_eq_raises_is_refused_with_jax_jits_value_error(jit):
    def f(x, s):
        return x + 1

    g = jit(f, static_argnums=1)
    first = _EqualityFails()
    assert g(1.0, first) == g(1.0, first) == 2.0  # the same object: equal, not compared
    kind, message = _error_of(lambda: g(1.0, _EqualityFails()))  # compared with the cached one
    assert kind is ValueError
    assert message.startswith("static arguments should be comparable using __eq__")
    assert "ArithmeticError" in message and "cannot compare" in message


def test_jaxs_cache_miss_explanation_names_the_users_call_site_as_under_jax_jit(caplog):
    def call_site(jit):
        f = jit(lambda x: x * 5)
        caplog.clear()
        with jax.explain_cache_misses(True), caplog.at_level("WARNING"):
            f(jnp.ones(3))  # a first call: JAX's trace of it explains its miss
        (message,) = [r.getMessage() for r in caplog.records if "CACHE MISS" in r.getMessage()]
        return message.split(" at ", 1)[1].split(":", 1)[0]

    assert call_site(stable_jit) == call_site(jax.jit) == __file__


def test_a_program_is_named_after_its_own_function_as_under_jax_jit():
    # The same body under two names is two programs: JAX names each after its
    # function in the lowered module, a nested jit equation and its messages.
    stable_jit(lambda x: x * 2)(1.0)

    def double(x):
        return x * 2

    assert (
        stable_jit(double).lower(1.0).as_text().splitlines()[0].split()[1]
        == jax.jit(double).lower(1.0).as_text().splitlines()[0].split()[1]
        == "@jit_double"
    )
    assert "name=double" in str(jax.make_jaxpr(lambda x: stable_jit(double)(x))(1.0))
