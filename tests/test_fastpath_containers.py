"""The fast path over containers and objects: params dicts, lists of plain objects, configs.

A redefined closure over a dict of arrays or a list of objects is re-checked against what its
last key was built from (identity first, containers of arrays in one pass, lists of objects in
bulk), never re-keyed. Each test runs with the record's checks interpreted and compiled, and
fails if a shortcut equates two values that key differently.
"""

import collections

import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import count_trace as _traced

from stablejit import stable_jit


def _weighted(d):
    # Position matters: a dict iterated in another order gives another result.
    return sum((i + 1) * v for i, v in enumerate(d.values()))


def test_closure_over_a_params_dict_hits_without_a_walk_and_sees_new_arrays(traced, walks):
    def step(params, x):
        def f(x):
            _traced()
            return x * params["layer"]["w"] + _weighted(params["layer"]) + params["b"]

        return stable_jit(f)(x)

    x = jnp.arange(3.0)
    for i in range(12):
        params = {
            "layer": {"w": jnp.full(3, float(i)), "v": jnp.ones(3) * i},
            "b": jnp.zeros(3) + i,
        }
        want = x * i + (i + 2 * i) + i
        np.testing.assert_allclose(step(params, x), want)
    assert traced() == 1
    assert walks() <= 3  # the first calls build the record; the rest are served by it


def test_a_dict_in_another_insertion_order_retraces(traced):
    def call(d, x):
        def f(x):
            _traced()
            return x * _weighted(d)

        return stable_jit(f)(x)

    x = jnp.ones(2)
    for _ in range(6):
        np.testing.assert_allclose(call({"a": 1.0, "b": 10.0}, x), x * 21.0)
    for _ in range(6):
        np.testing.assert_allclose(call({"b": 10.0, "a": 1.0}, x), x * 12.0)
    assert traced() == 2

    def by_name(d, x):
        def f(x):
            _traced()
            return x * (_weighted(d) + 1000 * d["a"])

        return stable_jit(f)(x)

    one, ten = jnp.ones(2), jnp.ones(2) * 10  # arrays of one signature: checked by type alone
    for _ in range(6):
        np.testing.assert_allclose(by_name({"a": one, "b": ten}, x), x * 1021.0)
    for _ in range(6):
        np.testing.assert_allclose(by_name({"b": ten, "a": one}, x), x * 1012.0)
    assert traced() == 4


def test_an_equal_number_of_another_type_retraces(traced):
    def call(d, x):
        def f(x):
            _traced()
            return x * d["k"]

        return stable_jit(f)(x)

    x = jnp.arange(3, dtype=jnp.int32)
    for v in [1, 1, 1, 1.0, 1.0, True, True, 1, 1.0]:
        out = call({"k": v}, x)
        want = x * v
        assert out.dtype == want.dtype, (v, out.dtype, want.dtype)
        np.testing.assert_array_equal(out, want)
    assert traced() == 3


def test_new_but_equal_string_keys_hit_and_a_string_subclass_key_retraces(traced):
    class Name(str):
        pass

    def call(d, x):
        def f(x):
            _traced()
            return x + sum(d.values())

        return stable_jit(f)(x)

    x = jnp.ones(2)
    for _ in range(6):
        np.testing.assert_allclose(call({"".join(["sc", "ale"]): 2.0}, x), x + 2.0)
    assert traced() == 1
    np.testing.assert_allclose(call({Name("scale"): 2.0}, x), x + 2.0)
    assert traced() == 2


class Processor:
    def __init__(self, scale, name):
        self.scale = scale
        self.name = name


def _apply(processors, x):
    for p in processors:
        x = x * p.scale + len(p.name)
    return x


def _call(processors, x):
    """A closure over ``processors``, defined anew and jitted on every call."""

    def f(x):
        _traced()
        return _apply(processors, x)

    return stable_jit(f)(x)


def test_an_object_mutated_in_place_retraces_and_an_equal_new_value_does_not(traced, walks):
    processors = [Processor(2.0, "a"), Processor(0.5, "bb"), Processor(3.0, "c")]

    x = jnp.ones(2)
    for _ in range(8):
        np.testing.assert_allclose(_call(processors, x), _apply(processors, x))
    assert traced() == 1
    processors[1].scale = 4.0  # in place: the key changes
    for _ in range(4):
        np.testing.assert_allclose(_call(processors, x), _apply(processors, x))
    assert traced() == 2
    processors[1].scale = float("4.0")  # an equal number, another object: the same key
    processors[2].name = "".join(["", "c"])
    for _ in range(4):
        np.testing.assert_allclose(_call(processors, x), _apply(processors, x))
    assert traced() == 2
    processors[0].extra = 1  # a new attribute: another state
    np.testing.assert_allclose(_call(processors, x), _apply(processors, x))
    assert traced() == 3
    walks_before = walks()
    for _ in range(6):
        _call(processors, x)
    assert walks() - walks_before <= 2


def test_the_same_object_twice_is_a_back_reference_not_a_match(traced):
    a, b = Processor(2.0, "a"), Processor(2.0, "a")

    x = jnp.ones(2)
    for _ in range(6):
        np.testing.assert_allclose(_call([a, b], x), _apply([a, b], x))
    assert traced() == 1
    for _ in range(3):
        np.testing.assert_allclose(_call([a, a], x), _apply([a, a], x))
    assert traced() == 2  # [a, a] keys its second item as a back reference


def test_many_objects_are_rechecked_in_bulk_and_any_change_among_them_retraces(traced, walks):
    # Past the codegen's BATCH_ITEMS: one pass over all the objects (in C where built).
    ps = [Processor(1.0 + i / 64, f"p{i}") for i in range(40)]
    x = jnp.ones(2)

    def check(expected_traces):
        for _ in range(3):
            np.testing.assert_allclose(_call(ps, x), _apply(ps, x), rtol=1e-6)
        assert traced() == expected_traces

    check(1)
    before = walks()
    check(1)
    assert walks() == before  # served by the bulk check, no walk
    ps[25].scale = 7.0  # one value, in place
    check(2)
    ps[25].scale = float("7.0")  # equal, another object: the same key
    check(2)
    ps[30] = ps[3]  # the same object twice: a back reference
    check(3)
    ps[30] = Processor(ps[30].scale, "p30")
    ps[30].extra = 1  # one more attribute
    check(4)
    del ps[30].extra
    ps[30].scale = 1.0 + 30 / 64  # back to the state of the first change: cached
    check(4)


def test_a_list_that_grows_and_an_object_of_another_class_retrace(traced):
    class Other(Processor):
        pass

    x = jnp.ones(2)
    ps = [Processor(2.0, "a")]
    for _ in range(5):
        np.testing.assert_allclose(_call(ps, x), _apply(ps, x))
    ps.append(Processor(1.0, "b"))
    for _ in range(5):
        np.testing.assert_allclose(_call(ps, x), _apply(ps, x))
    ps[0] = Other(2.0, "a")
    for _ in range(5):
        np.testing.assert_allclose(_call(ps, x), _apply(ps, x))
    assert traced() == 3


class _Decoy(Processor):
    """Answers ``__dict__`` with a state it never holds: what traces read is its real one.
    (Built anew by the method, which reads nothing that could change: a
    class's methods are part of its key.)"""

    def __getattribute__(self, name):
        if name == "__dict__":
            return {"scale": 1.0, "name": "decoy"}
        return object.__getattribute__(self, name)


def test_objects_whose_class_answers_dict_itself_are_checked_through_their_real_state(traced):
    ps = [_Decoy(2.0, "a"), _Decoy(3.0, "b")]

    x = jnp.ones(2)
    for _ in range(6):
        np.testing.assert_allclose(_call(ps, x), _apply(ps, x))
    ps[1].scale = 5.0
    for _ in range(3):
        np.testing.assert_allclose(_call(ps, x), _apply(ps, x))
    assert traced() == 2


@pytest.mark.parametrize("size, traces", [(3, 8), (2048, 1)], ids=["constant", "lifted"])
def test_a_numpy_array_in_a_dict_mutated_in_place_is_seen(traced, size, traces):
    # A small one is a constant keyed by its contents: each new value
    # retraces (a record that skipped the contents would return a stale
    # result). A large one is an input: new values are passed in.
    table = {"w": np.ones(size, np.float32)}

    def call(x):
        def f(x):
            _traced()
            return x * table["w"]

        return stable_jit(f)(x)

    x = jnp.arange(float(size))
    for i in range(8):
        table["w"][...] = i
        np.testing.assert_allclose(call(x), x * i)
        np.testing.assert_allclose(call(x), x * i)
    assert traced() == traces


def test_a_dict_the_trace_writes_to_stays_a_side_channel(traced):
    counts = {"n": 0}
    params = {"w": jnp.ones(2)}

    def call(x):
        def f(x):
            _traced()
            counts["n"] += 1
            return x * params["w"]

        return stable_jit(f)(x)

    x = jnp.arange(2.0)
    for i in range(8):
        params["w"] = jnp.full(2, float(i))
        np.testing.assert_allclose(call(x), x * i)
    assert traced() == 1 and counts["n"] == 1


def test_a_tuple_of_mixed_items_in_a_list_in_a_dict(traced):
    def call(cfg, x):
        def f(x):
            _traced()
            scale, (offset, name) = cfg["parts"][0], cfg["parts"][1]
            return x * scale + offset + len(name)

        return stable_jit(f)(x)

    x = jnp.ones(2)
    for i in range(6):
        np.testing.assert_allclose(
            call({"parts": [2.0, (jnp.ones(2) * i, "ab")]}, x), x * 2 + i + 2
        )
    np.testing.assert_allclose(call({"parts": [2.0, (jnp.ones(2), "abc")]}, x), x * 2 + 1 + 3)
    np.testing.assert_allclose(call({"parts": [-0.0, (jnp.ones(2), "abc")]}, x), x * -0.0 + 4)
    assert traced() == 3


def _layers(n, scale, names=("w", "b")):
    return {
        f"layer{i}": {k: jnp.full(2, scale * (i + 1) + j, jnp.float32) for j, k in enumerate(names)}
        for i in range(n)
    }


def _total(params):
    # Every place weighs differently, so a layer or name mixed up shows; a
    # Python number or a layer of another type counts apart, so one taken
    # for an array (a tracer) or for a plain dict shows.
    total = 0.0
    for i, layer in enumerate(params.values()):
        total = total + (0.0 if type(layer) is dict else 500.0)
        for j, v in enumerate(layer.values() if isinstance(layer, dict) else layer):
            total = total + (1000.0 if isinstance(v, float | str) else (10 * i + j + 1) * v)
    return total


def _call_total(params, x):
    def f(x):
        _traced()
        return x + _total(params)

    return stable_jit(f)(x)


def test_a_params_dict_of_layers_is_rechecked_in_bulk_and_sees_new_arrays(traced, walks):
    x = jnp.ones(2)
    for i in range(10):
        params = _layers(4, float(i))
        np.testing.assert_allclose(_call_total(params, x), x + _total(params))
    assert traced() == 1
    assert walks() <= 3


def test_layers_that_change_shape_name_or_kind_of_value_are_not_matched_in_bulk(traced):
    def two_layers(first, second, cls=dict):
        return {
            # (One signature for all arrays: JAX's own check sees no difference.)
            "layer0": {k: jnp.asarray(float(n)) for n, k in enumerate(first)},
            "layer1": cls((k, jnp.asarray(float(n))) for n, k in enumerate(second)),
        }

    x = jnp.ones(2)
    for _ in range(6):
        _call_total(two_layers("ab", "cd"), x)
    assert traced() == 1
    layer0 = two_layers("ab", "")["layer0"]
    changed = [
        two_layers("ab", "ce"),  # a name
        two_layers("abc", "d"),  # the same names, split otherwise
        # a Python float where a weak-typed scalar array was (JAX sees one signature)
        {"layer0": layer0, "layer1": {"c": jnp.asarray(0.0), "d": 1.0}},
        {"layer0": layer0, "layer1": {"c": jnp.asarray(0.0), "d": "one"}},
        {"layer0": layer0, "layer1": [jnp.asarray(0.0), jnp.asarray(1.0)]},
        two_layers("ab", "cd", cls=collections.OrderedDict),
    ]
    for params in changed:
        for _ in range(3):  # the base's record in front again, where a call looks first
            _call_total(two_layers("ab", "cd"), x)
        np.testing.assert_allclose(_call_total(params, x), x + _total(params))
    assert traced() == 1 + len(changed)


def test_one_layer_dict_at_two_places_is_not_matched_as_two_dicts(traced):
    def call(params, x):
        def f(x):
            _traced()
            # Identity is part of the structure: traced code may test it.
            return x + _total(params) + (100.0 if params["a"] is params["b"] else 0.0)

        return stable_jit(f)(x)

    def want(params):
        return x + _total(params) + (100.0 if params["a"] is params["b"] else 0.0)

    x = jnp.ones(2)
    for i in range(6):
        params = {
            "a": _layers(1, i)["layer0"],
            "b": _layers(1, i + 1)["layer0"],
            "c": _layers(1, i + 2)["layer0"],
        }
        np.testing.assert_allclose(call(params, x), want(params))
    assert traced() == 1
    layer = _layers(1, 7.0)["layer0"]
    params = {"a": layer, "b": layer, "c": _layers(1, 9.0)["layer0"]}
    np.testing.assert_allclose(call(params, x), want(params))
    assert traced() == 2


def test_a_layer_dict_also_reached_elsewhere_is_a_back_reference(traced):
    def call(extra, params, x):
        def f(x):
            _traced()
            shared = any(layer is extra for layer in params.values())
            return x + _total(params) + extra["w"] + (100.0 if shared else 0.0)

        return stable_jit(f)(x)

    def want(extra, params):
        shared = any(layer is extra for layer in params.values())
        return x + _total(params) + extra["w"] + (100.0 if shared else 0.0)

    x = jnp.ones(2)
    for i in range(6):
        params, extra = _layers(3, float(i)), _layers(1, 5.0)["layer0"]
        np.testing.assert_allclose(call(extra, params, x), want(extra, params))
    assert traced() == 1
    params = _layers(3, 4.0)
    extra = params["layer1"]  # met first as `extra`, then again inside `params`
    np.testing.assert_allclose(call(extra, params, x), want(extra, params))
    assert traced() == 2
