"""stable_jit mirrors jax.jit's signature and behaviour for the user's arguments."""

import functools
import inspect
import logging
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import stablejit
from stablejit import stable_jit


def test_signature_matches_jax_jit():
    ours = inspect.signature(stable_jit).parameters
    # abstracted_axes: experimental, dropped from jax.jit in JAX 0.7; not mirrored.
    theirs = {
        k: p for k, p in inspect.signature(jax.jit).parameters.items() if k != "abstracted_axes"
    }
    # stablejit's own options come after jax.jit's, keyword-only.
    own = ["lift_scalars"]
    assert list(ours) == list(theirs) + own
    assert all(ours[name].kind is inspect.Parameter.KEYWORD_ONLY for name in own)
    for name, p in theirs.items():
        assert ours[name].kind == p.kind, name
        if name != "fun":
            assert repr(ours[name].default) == repr(p.default) or name.endswith("shardings")


def test_decorator_with_and_without_arguments():
    @stable_jit
    def f(x):
        return x + 1

    @stable_jit(static_argnums=1)
    def g(x, n):
        return x * n

    np.testing.assert_array_equal(f(jnp.zeros(1)), [1.0])
    np.testing.assert_array_equal(g(jnp.ones(1), 3), [3.0])
    assert f.__name__ == "f" and g.__qualname__.endswith("g")
    assert f.__wrapped__(1) == 2


def test_static_argnums_and_argnames_in_the_users_positions(traces):
    def f(x, n, *, mode):
        traces()
        return x * n if mode == "mul" else x + n

    g = stable_jit(f, static_argnums=1, static_argnames="mode")
    np.testing.assert_array_equal(g(jnp.ones(2), 3, mode="mul"), [3.0, 3.0])
    np.testing.assert_array_equal(g(jnp.ones(2), 3, mode="mul"), [3.0, 3.0])
    np.testing.assert_array_equal(g(jnp.ones(2), 3, mode="add"), [4.0, 4.0])
    np.testing.assert_array_equal(g(jnp.ones(2), 4, mode="add"), [5.0, 5.0])
    assert traces.n == 3


def test_static_argnames_resolves_positional_use(traces):
    def f(x, n):
        traces()
        return x * n

    g = stable_jit(f, static_argnames="n")
    np.testing.assert_array_equal(g(jnp.ones(1), 2), [2.0])
    np.testing.assert_array_equal(g(jnp.ones(1), n=2), [2.0])
    np.testing.assert_array_equal(g(jnp.ones(1), 5), [5.0])


def test_negative_static_argnums():
    g = stable_jit(lambda x, n: x * n, static_argnums=-1)
    np.testing.assert_array_equal(g(jnp.ones(1), 4), [4.0])


def test_donate_argnums_donates_the_users_argument_not_lifted_arrays():
    w = jnp.ones(3)

    def f(x, y):
        return x + y + w

    g = stable_jit(f, donate_argnums=0)
    x = jnp.zeros(3)
    np.testing.assert_array_equal(g(x, jnp.ones(3)), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(w, np.ones(3))  # lifted array untouched
    lowered = g.lower(jnp.zeros(3), jnp.ones(3))
    assert [a.donated for a in jax.tree_util.tree_leaves(lowered.args_info)] == [True, False]


def test_donate_argnames():
    g = stable_jit(lambda x, y: x + y, donate_argnames="y")
    lowered = g.lower(jnp.zeros(3), y=jnp.ones(3))
    args, kwargs = lowered.args_info
    assert not args[0].donated and kwargs["y"].donated


def test_in_and_out_shardings():
    # SingleDeviceSharding itself is deprecated from jax 0.12, which makes it this way.
    make = getattr(jax.sharding, "make_single_device_sharding", None)
    make = make or jax.sharding.SingleDeviceSharding
    s = make(jax.devices()[0])
    w = jnp.ones(2)
    g = stable_jit(lambda x, y: (x + y + w, x), in_shardings=(s, None), out_shardings=s)
    out = g(jnp.ones(2), jnp.ones(2))
    np.testing.assert_array_equal(out[0], [3.0, 3.0])
    assert out[0].sharding == s
    b = stable_jit(lambda x, y: x + y + w, in_shardings=s)
    np.testing.assert_array_equal(b(jnp.ones(2), jnp.ones(2)), [3.0, 3.0])


def test_keep_unused_inline_and_compiler_options_are_passed_through():
    g = stable_jit(lambda x, y: x, keep_unused=True, inline=True)
    np.testing.assert_array_equal(g(jnp.ones(1), jnp.zeros(1)), [1.0])
    text = g.lower(jnp.ones(1), jnp.zeros(1)).as_text()
    assert text.count("tensor<1xf32>") >= 2
    h = stable_jit(lambda x: x * 2, compiler_options={"xla_embed_ir_in_executable": True})
    np.testing.assert_array_equal(h(jnp.ones(1)), [2.0])


def test_lower_compile_and_call_take_the_users_arguments_only():
    w = jnp.arange(3.0)
    g = stable_jit(lambda x: x * w)
    compiled = g.lower(jnp.ones(3)).compile()
    np.testing.assert_array_equal(compiled(jnp.ones(3)), w)
    traced = g.trace(jnp.ones(3))
    np.testing.assert_array_equal(traced.lower().compile()(jnp.full(3, 2.0)), w * 2)
    args, kwargs = traced.lower().args_info
    assert len(args) == 1 and kwargs == {}


def test_eval_shape():
    g = stable_jit(lambda x: jnp.concatenate([x, x]))
    out = g.eval_shape(jax.ShapeDtypeStruct((3,), jnp.float16))
    assert out.shape == (6,) and out.dtype == jnp.float16


def test_clear_cache_drops_every_redefinition(traces):
    def make():
        def f(x):
            traces()
            return x

        return stable_jit(f)

    make()(jnp.ones(1))
    make().clear_cache()
    make()(jnp.ones(1))
    assert traces.n == 2


def test_works_with_any_callable_object():
    class Affine:
        def __init__(self, a):
            self.a = a

        def __call__(self, x):
            return self.a * x

    np.testing.assert_array_equal(stable_jit(Affine(jnp.full(1, 2.0)))(jnp.ones(1)), [2.0])


def test_kwargs_and_pytree_arguments():
    g = stable_jit(lambda d, *, scale: {"y": d["x"] * scale})
    out = g({"x": jnp.ones(2)}, scale=jnp.asarray(3.0))
    np.testing.assert_array_equal(out["y"], [3.0, 3.0])


def test_unknown_option_is_a_type_error():
    with pytest.raises(TypeError):
        stable_jit(lambda x: x, static_argnumz=1)


@pytest.mark.parametrize(
    "opts",
    [
        {"static_argnums": "0"},
        {"static_argnames": 0},
        {"donate_argnums": 1.5},
        {"compiler_options": 3},
    ],
)
def test_bad_option_values_name_the_option(opts):
    with pytest.raises(TypeError, match=next(iter(opts))):
        stable_jit(lambda x: x, **opts)


def test_a_nonlocal_rebinding_of_a_lifted_array_runs_and_python_values_persist():
    w = jnp.ones(2)
    helper = None

    def f(x):
        nonlocal w, helper
        out = x * w
        helper = "built while traced"  # as numpyro's HMC binds vv_update
        return out

    np.testing.assert_array_equal(stable_jit(f)(jnp.full(2, 3.0)), [3.0, 3.0])
    assert helper == "built while traced"  # as under jax.jit
    assert isinstance(w, jax.Array) and not isinstance(w, jax.core.Tracer)


def test_a_traced_update_of_a_lifted_closure_array_is_dropped_never_leaked(caplog):
    w = jnp.ones(2)

    def f(x):
        nonlocal w
        w = w + x  # under jax.jit the tracer would leak into the cell
        return w

    caplog.set_level(logging.INFO, logger="stablejit")
    g = stable_jit(f)
    np.testing.assert_array_equal(g(jnp.ones(2)), [2.0, 2.0])
    np.testing.assert_array_equal(w, [1.0, 1.0])  # the program's array, not a tracer
    np.testing.assert_array_equal(g(jnp.ones(2)), [2.0, 2.0])  # as jax.jit's cached call
    notices = [r.getMessage() for r in caplog.records if r.name == "stablejit"]
    assert any("the closure variable 'w'" in m and "dropped" in m for m in notices)


def test_global_writes_reach_the_module_while_its_arrays_are_lifted():
    ns = {"W": jnp.ones(1), "LOG": None}
    exec("def f(x):\n    global W, LOG\n    LOG = 'traced'\n    W = W + x\n    return W\n", ns)
    np.testing.assert_array_equal(stable_jit(ns["f"])(jnp.ones(1)), [2.0])
    assert ns["LOG"] == "traced"  # the module's own namespace, as under jax.jit
    np.testing.assert_array_equal(ns["W"], [1.0])  # the traced update dropped, not leaked
    ns["W"] = jnp.full(1, 5.0)  # lifted: a new value, no retrace, never stale
    np.testing.assert_array_equal(stable_jit(ns["f"])(jnp.ones(1)), [6.0])


def test_trace_time_errors_propagate_and_do_not_poison_the_cache():
    box = {"fail": True}

    def f(x):
        if box["fail"]:
            raise ValueError("user error")
        return x

    g = stable_jit(f)
    with pytest.raises(ValueError, match="user error"):
        g(jnp.ones(1))
    box["fail"] = False
    np.testing.assert_array_equal(g(jnp.ones(1)), [1.0])


def test_config_cache_size_validates():
    with pytest.raises(ValueError, match="cache_size"):
        stablejit.config.cache_size = 0
    with pytest.raises(TypeError, match="cache_size"):
        stablejit.config.cache_size = "big"


def test_partial_of_stable_jit_decorator_factory():
    deco = functools.partial(stable_jit, static_argnums=0)
    g = deco(lambda n, x: x * n)
    np.testing.assert_array_equal(g(3, jnp.ones(1)), [3.0])


def test_keyword_arguments_named_like_stablejits_own_parameters_reach_the_function():
    traces = []

    def outer(x):
        def f(x, fn=0.0, opts=0.0, args=0.0, kwargs=0.0):
            traces.append(None)
            return x + fn + 10 * opts + 100 * args + 1000 * kwargs

        return stable_jit(f)(x, fn=1.0, opts=2.0, args=3.0, kwargs=4.0)

    x = jnp.ones(2)
    for _ in range(8):  # through the general call path, then the closure's own
        np.testing.assert_allclose(outer(x), x + 4321.0)
    assert len(traces) == 1
    g = stable_jit(lambda x, fn: x * fn, static_argnames="fn")
    np.testing.assert_allclose(g(x, fn=3.0), x * 3.0)


def test_a_partial_of_a_stable_jit_function_keeps_it_whole():
    # On the pure path StableJitted is itself a functools.partial; a partial made of it
    # must hold it (not be flattened into stablejit's call function), for code that
    # reads .func.
    def scale(x, y):
        return x * y

    for _ in range(8):  # the general path's partials, then the record's own call function's
        jitted = stable_jit(scale)
        bound = functools.partial(jitted, y=3.0)
        assert bound.func is jitted
        np.testing.assert_allclose(bound(jnp.ones(2)), jnp.full(2, 3.0))
    assert inspect.signature(jitted) == inspect.signature(scale)


def test_stable_jit_itself_behaves_as_the_function_it_stands_for():
    # With the C accelerator, stable_jit is a C object that makes its common call without a
    # Python frame: it must still pickle, bind, unwrap and document as a function does.
    assert pickle.loads(pickle.dumps(stable_jit)) is stable_jit
    assert inspect.unwrap(stable_jit) is stable_jit
    assert list(inspect.signature(stable_jit).parameters)[:2] == ["fun", "in_shardings"]
    assert stable_jit.__name__ == "stable_jit"
    assert stable_jit.__doc__.startswith("``jax.jit`` whose cache survives")

    class Holder:
        jit = stable_jit  # a class attribute binds, as a function's would

    holder = Holder()
    assert holder.jit.__self__ is holder and Holder.jit is stable_jit


def test_a_closure_that_calls_stable_jit_keeps_its_fast_path():
    # stable_jit is keyed by identity wherever a function reads it (it is one object for the
    # process), so a function that jits another keeps a fast-path record.
    def helper_of(w):
        def helper(x):
            return x * w

        return helper

    def outer_of(w):
        def outer(x):
            return stable_jit(helper_of(w))(x)

        return stable_jit(outer)

    w, x = jnp.full(2, 3.0), jnp.ones(2)
    for _ in range(8):
        np.testing.assert_allclose(outer_of(w)(x), x * w)
    from stablejit._fingerprint.code import code_info

    jitted = outer_of(w)
    assert code_info(jitted.__wrapped__.__code__).fast.front is not None
