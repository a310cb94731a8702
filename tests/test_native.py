"""The optional C accelerator: built where a compiler is, and switched off by one variable.

``stablejit/_speedups_c/`` gives a redefined closure whose checks are all identity tests a call
function with no Python frame; everything else (and every install without a compiler) runs
the same checks as generated Python. The behaviour is tested both ways: the fast-path tests
run each record natively and as Python (the ``record_checks`` fixture), and ``.ci/release``
runs them again with ``STABLEJIT_PURE_PYTHON=1`` in an install built with no working compiler.
"""

import collections
import os
import subprocess
import sys
import sysconfig
import weakref

import _helpers
import jax.numpy as jnp
import numpy as np
import pytest

import stablejit
from stablejit import _native as native
from stablejit import stable_jit

_TRACED: list = []
_PURE = os.environ.get("STABLEJIT_PURE_PYTHON", "") not in ("", "0")


def test_the_accelerator_is_built_where_a_compiler_is_unless_switched_off():
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if _PURE:
        assert native.NATIVE is None
    elif subprocess.run(["which", compiler], capture_output=True).returncode == 0:
        assert native.NATIVE is not None, "the C accelerator failed to build: see pip -v"


def test_pure_python_is_chosen_by_the_variable_in_a_fresh_process():
    code = "from stablejit import _native as native; print(native.NATIVE is None)"
    env = {**os.environ, "STABLEJIT_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr


@pytest.mark.skipif(native.NATIVE is None, reason="the C accelerator is not built")
@pytest.mark.parametrize(
    "change, traced",
    [
        ("equal float", 0),  # another object, equal: the general path hits
        ("other float", 1),
        ("defaults", 1),
        ("function attribute", 1),  # part of the key, found by the full walk
        ("global", 1),
        ("array", 0),  # another array of the same shape: passed in
    ],
)
def test_a_native_call_function_hands_what_it_does_not_vouch_for_to_the_general_path(
    change, traced
):
    # Identity tests only: whatever is not the very object the record saw
    # goes to the general path, which decides afresh (never stale).
    def make(scale, w):
        def f(x, k=2):
            _TRACED.append(None)  # a global list: identity-checked, a side channel
            return x * scale * k + w * _OFFSET

        return stable_jit(f), f

    global _OFFSET
    x, w = jnp.ones(2), jnp.ones(2)
    for _ in range(6):
        jitted, f = make(1.5, w)
        np.testing.assert_array_equal(jitted(x), x * 3 + w)
    n = len(_TRACED)
    scale, k, offset = 1.5, 2, 1.0
    if change == "equal float":
        jitted, f = make(float("1.5"), w)
    elif change == "other float":
        scale = 2.5
        jitted, f = make(scale, w)
    elif change == "array":
        w = w + 6.0
        jitted, f = make(1.5, w)
    else:
        jitted, f = make(1.5, w)
    assert type(jitted._call) is native.NATIVE.RecordCall
    if change == "defaults":
        k = 3
        f.__defaults__ = (k,)
    elif change == "function attribute":
        f.attribute = 1
    elif change == "global":
        offset = _OFFSET = 2.0
    try:
        np.testing.assert_array_equal(jitted(x), x * scale * k + w * offset)
    finally:
        _OFFSET = 1.0
    assert len(_TRACED) - n == traced


_OFFSET = 1.0


def _params(n_layers, scale=1.0):
    return {
        f"layer{i}": {f"w{j}": jnp.full((2,), scale * (i + j)) for j in range(3)}
        for i in range(n_layers)
    }


def _total(params):
    return sum(sum(layer.values()) for layer in params.values())


@pytest.mark.skipif(native.NATIVE is None, reason="the C accelerator is not built")
def test_a_closure_over_a_params_dict_gets_a_native_call_function_that_sees_every_change(
    monkeypatch,
):
    # Each new record gets its call function at its first hit: every check below meets one.
    monkeypatch.setattr("stablejit._fingerprint.records.COMPILE_AFTER", 1)

    def make(params):
        def f(x):  # calls no other function of the program's (those nest)
            _TRACED.append(None)
            return x + sum(sum(layer.values()) for layer in params.values())

        return stable_jit(f)

    x = jnp.ones(2)
    params = _params(3)
    for _ in range(6):
        np.testing.assert_allclose(make(params)(x), x + _total(params))
    assert type(make(params)._call) is native.NATIVE.RecordCall
    n = len(_TRACED)

    def check(p, traced, guarded=True):
        nonlocal n
        for _ in range(4):
            np.testing.assert_allclose(make(p)(x), x + _total(p))
        assert len(_TRACED) - n == traced, p.keys()
        assert (type(make(p)._call) is native.NATIVE.RecordCall) is guarded
        n = len(_TRACED)

    check(_params(3, scale=2.0), 0)  # new arrays, same structure: passed in
    params["layer1"]["w2"] = jnp.full((2,), 7.0)  # in place, an array: passed in
    check(params, 0)
    renamed = {"".join(["lay", "er", str(i)]): params[f"layer{i}"] for i in range(3)}
    check(renamed, 0)  # equal keys, other strings
    params["layer1"]["w2"] = jnp.full((1,), 7.0)  # new shape: JAX retraces
    check(params, 1)
    params["layer1"]["w3"] = jnp.full((2,), 7.0)  # a new key: a new structure
    check(params, 1)
    params["layer1"]["w4"] = params["layer1"].pop("w3")  # as many keys, one renamed
    check(params, 1)
    params["layer2"] = params["layer0"]  # one dict twice: a back reference
    check(params, 1)  # (which the accelerator checks too)
    params["layer2"] = {"w0": 1.0, "w1": jnp.ones(2), "w2": jnp.ones(2)}  # a float for an array
    check(params, 1)


class _Config:
    """A plain object (an HF logits processor's kind): checked through its ``__dict__``."""

    def __init__(self, scale):
        self.scale = scale
        self.name = "config"


_Pair = collections.namedtuple("_Pair", "w scale")


def _scaler(scale):
    def scaled(x):
        return x * scale

    return scaled


def _shared(w):
    layer = {"w": w}
    return [layer, layer]  # one dict twice: a back reference


# kind -> (how the closure uses its value, the value seen first, [(the next value, traces,
# eager)]): each value is checked against the record of the one before it.
_NESTED = {
    "nested function": (
        lambda v, x: v(x),
        lambda: _scaler(2.0),
        [
            (lambda: _scaler(2.0), 0, lambda x: x * 2.0),
            (lambda: _scaler(float("2.0")), 0, lambda x: x * 2.0),  # equal, another object
            (lambda: _scaler(-2.0), 1, lambda x: x * -2.0),
            (lambda: _scaler(2), 1, lambda x: x * 2),  # an int: another key
        ],
    ),
    "namedtuple": (
        lambda v, x: x * v.w + v.scale,
        lambda: _Pair(jnp.ones(2), 2.0),
        [
            (lambda: _Pair(3 * jnp.ones(2), 2.0), 0, lambda x: x * 3.0 + 2.0),
            (lambda: _Pair(jnp.ones(2), 5.0), 1, lambda x: x + 5.0),
        ],
    ),
    "list": (
        lambda v, x: x * v[0] + 1 / jnp.asarray(v[1]),
        lambda: [jnp.ones(2), 0.0],
        [
            (lambda: [3 * jnp.ones(2), 0.0], 0, lambda x: x * 3.0 + np.inf),
            (lambda: [jnp.ones(2), -0.0], 1, lambda x: x - np.inf),  # -0.0 is not 0.0
            (lambda: [jnp.ones(2), 2.0], 1, lambda x: x + 0.5),
        ],
    ),
    "object": (
        lambda v, x: x * v.scale,
        lambda: _Config(2.0),
        [
            (lambda: _Config(2.0), 0, lambda x: x * 2.0),
            (lambda: _Config(4.0), 1, lambda x: x * 4.0),
        ],
    ),
    "back reference": (
        lambda v, x: x * v[0]["w"] + v[1]["w"],
        lambda: _shared(jnp.ones(2)),
        [
            (lambda: _shared(3 * jnp.ones(2)), 0, lambda x: x * 3.0 + 3.0),
            (lambda: [{"w": jnp.ones(2)}, {"w": 5 * jnp.ones(2)}], 1, lambda x: x + 5.0),
        ],
    ),
}


@pytest.mark.skipif(native.NATIVE is None, reason="the C accelerator is not built")
@pytest.mark.parametrize("kind", sorted(_NESTED))
def test_a_native_call_function_checks_nested_functions_containers_and_objects(kind, monkeypatch):
    # Each record gets its call function at its first hit.
    monkeypatch.setattr("stablejit._fingerprint.records.COMPILE_AFTER", 1)
    use, first, changes = _NESTED[kind]

    def make(value):
        def f(x):
            _TRACED.append(None)
            return use(value, x)

        return stable_jit(f)

    x = jnp.ones(2)
    for _ in range(3):
        make(first())(x)
    assert type(make(first())._call) is native.NATIVE.RecordCall
    for again, traced, eager in changes:
        n = len(_TRACED)
        for _ in range(5):  # a new structure's record gets its call function after a few hits
            jitted = make(again())
            np.testing.assert_array_equal(jitted(x), eager(x))
        assert len(_TRACED) - n == traced, (kind, eager)
        assert type(jitted._call) is native.NATIVE.RecordCall


def _scaled(k):
    def f(x):
        _TRACED.append(1)
        return x * k

    return f


@pytest.mark.skipif(native.NATIVE is None, reason="the C accelerator is not built")
def test_wrappers_made_and_dropped_on_every_call_come_back_clean():
    # A wrapper's memory is kept for the next one (one is made and dropped on
    # every call of a function that defines its jitted function inside): what
    # the last one was given must not reach the next.
    x = jnp.arange(3.0)
    for _ in range(8):  # until the code's record has its call function
        stable_jit(_scaled(2.0))(x)
    old = stable_jit(_scaled(2.0))
    old.note = "set by the caller"
    dead = weakref.ref(old)
    del old
    assert dead() is None
    many = [stable_jit(_scaled(float(k))) for k in range(40)]  # more than are kept
    assert len({id(w) for w in many}) == 40
    for k, w in enumerate(many):
        assert not hasattr(w, "note")
        assert w.__wrapped__.__closure__[0].cell_contents == float(k)
        np.testing.assert_allclose(w(x), x * k)


@pytest.mark.skipif(native.NATIVE is None, reason="the C accelerator is not built")
def test_stable_jit_finds_the_records_clear_cache_made_anew():
    # stable_jit remembers the last code it made a wrapper for, with its
    # records; clear_cache replaces them, and the memo with them.
    from stablejit._fingerprint.code import code_info

    x = jnp.arange(3.0)
    for _ in range(8):
        stable_jit(_scaled(2.0))(x)
    stablejit.clear_cache()
    _TRACED.clear()
    for _ in range(8):
        np.testing.assert_allclose(stable_jit(_scaled(2.0))(x), x * 2.0)
    assert len(_TRACED) == 1
    fresh = code_info(_scaled(2.0).__code__).fast
    assert stable_jit(_scaled(2.0))._call is fresh.call is not None


def _python_frames_of_stablejit(call):
    """The stablejit functions written in Python that ``call()`` enters."""
    root = os.path.dirname(stablejit.__file__)
    entered = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            entered.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return entered


@pytest.mark.skipif(native.NATIVE is None, reason="the C accelerator is not built")
@pytest.mark.parametrize("n", [1, 40])
def test_a_native_hit_runs_no_python_of_stablejit_however_much_the_closure_holds(n):
    # Past 16 arrays or numbered objects a RecordCall's buffers are sized from its
    # slots, counted as it checks them: a count short of what a match takes
    # would send every call to the general path, in Python.
    def make(params, configs):
        def f(x):
            _TRACED.append(None)
            return x * sum(c.scale for c in configs) + sum(params.values())

        return stable_jit(f)

    params = {f"w{i}": jnp.full((2,), float(i)) for i in range(n)}
    configs = [_Config(float(i)) for i in range(n)]
    x = jnp.ones(2)
    want = x * sum(range(n)) + sum(float(i) for i in range(n))
    for _ in range(8):
        np.testing.assert_allclose(make(params, configs)(x), want)
    fresh = {k: v + 1 for k, v in params.items()}  # new arrays: passed in, not checked
    entered = _python_frames_of_stablejit(lambda: make(fresh, configs)(x).block_until_ready())
    assert entered == []


class _Computed:
    """A plain object whose ``__dict__`` is computed: a new dict on each read."""

    def __init__(self, scale):
        self.scale = scale

    @property
    def __dict__(self):
        return {"scale": self.scale}


def test_an_object_whose_dict_is_computed_gets_no_record(traced):
    # A record's check would number a new dict on each read, which it cannot hold to the
    # dict the walk numbered (nor run user code in the middle of a check): the walk keys it.
    from stablejit._fingerprint.code import code_info

    def make(procs):
        def f(x):
            _helpers.count_trace()
            return x * sum(p.scale for p in procs)

        return stable_jit(f)

    procs = [_Computed(float(i)) for i in range(20)]
    x = jnp.ones(2)
    for _ in range(8):
        jitted = make(procs)
        np.testing.assert_allclose(jitted(x), x * 190.0)
    assert traced() == 1
    assert code_info(jitted.__wrapped__.__code__).fast.front is None
