"""Models whose flatten only reads their fields are re-checked through those fields, never stale.

flax nnx's modules, Variables and PytreeState, and equinox's modules, are declared to flatten
from their fields alone (stablejit's ``_fingerprint/pure_nodes.py``): a closure over such a
model is re-checked field by field, with no call of the flatten. Every change the flatten would
have seen must still be seen (a new trace, the changed model's result), and a declaration made
wrong on purpose must be caught by these tests.
"""

import gc
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import call_in_closure, check_in_closure, eqx_stack, nnx_mlp

import stablejit
from stablejit._fingerprint import pure_nodes
from stablejit._fingerprint.container_guards import ListGuard, TupleGuard
from stablejit._fingerprint.guards import ANY_ARRAY
from stablejit._fingerprint.pure_nodes import DICT, FieldsGuard, Slot
from stablejit._fingerprint.pytree_guards import registered_flatten


def _guards_of(model):
    """The guards that records hold for ``model`` (what re-checks it)."""
    from stablejit._fingerprint.records import Record

    return [
        g
        for r in gc.get_objects()
        if type(r) is Record
        for g in r.cells
        if getattr(g, "type", None) is type(model)
    ]


def test_an_nnx_model_is_rechecked_through_its_fields_and_every_change_is_seen(traced, walks):
    nnx = pytest.importorskip("flax.nnx")
    x = jnp.ones((2, 3))
    model = nnx_mlp(nnx, 2)
    check_in_closure(model, x, 1, traced, calls=6)
    assert {type(g) for g in _guards_of(model)} == {FieldsGuard}
    before = walks()
    layer = model.layers[1]
    layer.kernel.set_value(jnp.ones((3, 3)) * 0.5)  # a Variable's value replaced: a hit
    check_in_closure(model, x, 1, traced)
    assert walks() == before
    layer.kernel.set_value(jnp.ones((3, 4)))  # of another shape: JAX traces anew
    layer.bias.set_value(jnp.ones(4))
    model.layers.append(nnx.Linear(4, 3, rngs=nnx.Rngs(1)))  # a layer added
    check_in_closure(model, x, 2, traced)
    model.layers.pop()  # and removed
    layer.kernel.set_value(jnp.ones((3, 3)))
    layer.bias.set_value(jnp.ones(3))
    check_in_closure(model, x, 2, traced)  # the first structure again: cached
    model.power = 2  # a field rebound
    check_in_closure(model, x, 3, traced)
    layer.use_bias, layer.bias = False, None  # a static field of a layer deep in the model
    check_in_closure(model, x, 4, traced)
    layer.kernel.set_metadata(note=1)  # a Variable's metadata: an item added
    check_in_closure(model, x, 5, traced)
    layer.kernel.set_metadata(note=2)  # and changed
    check_in_closure(model, x, 6, traced)
    layer.kernel.set_value(np.full((3, 3), 2.0, np.float32))  # a small NumPy constant
    check_in_closure(model, x, 7, traced)


def test_an_equinox_model_is_rechecked_through_its_fields_and_every_change_is_seen(traced, walks):
    eqx = pytest.importorskip("equinox")

    Stack = eqx_stack(eqx)
    keys = jax.random.split(jax.random.key(0), 2)
    model = Stack(tuple(eqx.nn.Linear(3, 3, key=k) for k in keys), 2)
    x = jnp.ones((2, 3))
    check_in_closure(model, x, 1, traced, calls=6, vmap=True)
    assert {type(g) for g in _guards_of(model)} == {FieldsGuard}
    before = walks()
    layer = model.layers[0]
    object.__setattr__(layer, "weight", jnp.ones((3, 3)) * 0.5)  # a field rebound in place
    check_in_closure(model, x, 1, traced, vmap=True)
    assert walks() == before
    object.__setattr__(layer, "use_bias", False)  # a static field (its bias still used)
    check_in_closure(model, x, 2, traced, vmap=True)
    object.__setattr__(model, "depth", 1)
    check_in_closure(model, x, 3, traced, vmap=True)
    object.__setattr__(layer, "extra", 1)  # a field added (its wrapper fields read)
    check_in_closure(model, x, 4, traced, vmap=True)


class Tagged:
    """A node whose flatten reads a global, not only its fields."""

    def __init__(self, w):
        self.w = w

    def __call__(self, x):
        return x * self.w


TAG = "a"


def _tagged_flatten(s):
    return (s.w,), TAG


jax.tree_util.register_pytree_node(Tagged, _tagged_flatten, lambda _, ch: Tagged(ch[0]))


def _sees_global_change(traced) -> bool:
    """Whether a closure over a Tagged is traced anew once TAG is rebound
    (its key changed)."""
    global TAG
    stablejit.clear_cache()  # (records built before: their guards are kept)
    x = jnp.arange(3.0)
    node = Tagged(jnp.ones(3))
    TAG = "a"
    for _ in range(6):
        call_in_closure(node, x)
    traces = traced()
    TAG = "b"
    try:
        np.testing.assert_allclose(call_in_closure(node, x), node(x))
        return traced() == traces + 1
    finally:
        TAG = "a"


def test_a_flatten_declared_pure_is_trusted_so_one_reading_more_must_not_be(traced, monkeypatch):
    assert _sees_global_change(traced)  # undeclared: its flatten is called
    monkeypatch.setitem(pure_nodes.PURE, _tagged_flatten, (DICT,))
    assert not _sees_global_change(traced)  # declared wrongly: stale, as tests must catch


def _sees_metadata_change(nnx, traced) -> bool:
    stablejit.clear_cache()
    x = jnp.ones((2, 3))
    layer = nnx.Linear(3, 3, rngs=nnx.Rngs(0))
    for _ in range(6):
        call_in_closure(layer, x)
    traces = traced()
    layer.kernel.set_metadata(note=1)
    call_in_closure(layer, x)
    return traced() == traces + 1


def test_a_variable_declared_without_its_metadata_would_miss_a_change(traced, monkeypatch):
    nnx = pytest.importorskip("flax.nnx")
    assert _sees_metadata_change(nnx, traced)
    real = pure_nodes._library_reads

    def wrong(flatten):  # the metadata left out of a Variable's reads
        reads = real(flatten)
        return reads[:1] if reads and reads[0] == Slot("_raw_value") else reads

    monkeypatch.setattr(pure_nodes, "_library_reads", wrong)
    assert not _sees_metadata_change(nnx, traced)


def test_what_a_declared_flatten_makes_that_is_no_field_keeps_its_flatten():
    node = Tagged(jnp.ones(3))
    children = [(node.w, ANY_ARRAY)]
    made = (["a"], ListGuard(("a",)))  # metadata it makes: a list, numbered by the walk
    with pytest.raises(pure_nodes._Impure):
        pure_nodes.plan_of(node, (DICT,), made, children)
    names = (("a",), TupleGuard(tuple, ("a",)))  # a tuple of atoms: a constant of the flatten
    assert pure_nodes.plan_of(node, (DICT,), names, children) == (("w",), (("w", ANY_ARRAY),))


def test_closures_over_several_models_called_in_turns_are_each_served_by_their_record(
    traced, walks, record_checks
):
    nnx = pytest.importorskip("flax.nnx")
    x = jnp.ones((2, 3))
    # Six: more than a code kept records of before (four), which, called in a cycle,
    # missed every one and walked every model on every call.
    models = [nnx_mlp(nnx, 2) for _ in range(6)]
    for i in range(1, 6):  # other structures
        models[i].layers.extend(nnx.Linear(3, 3, rngs=nnx.Rngs(i)) for _ in range(i))
    for _ in range(6):
        for model in models:
            call_in_closure(model, x)
    before = walks()
    for _ in range(3):
        for model in models:  # each call's record is not the last one's
            np.testing.assert_allclose(call_in_closure(model, x), model(x), rtol=1e-6)
    assert traced() == 6
    if record_checks == "native":  # (else the walk tries each record's match in turn)
        assert walks() == before
    models[0].power = 3  # a change is seen whichever record was the last
    np.testing.assert_allclose(call_in_closure(models[0], x), models[0](x), rtol=1e-6)
    assert traced() == 7


class Shown:
    """A node whose class answers ``__dict__`` itself, with a value it derives."""

    def __init__(self, w, n):
        self.w, self.n = w, n

    def __getattribute__(self, name):
        if name == "__dict__":
            real = object.__getattribute__(self, "__dict__")
            return {"w": real["w"], "n": real["n"] + 1}
        return object.__getattribute__(self, name)

    def __call__(self, x):
        return x * self.w


def _shown_flatten(s):
    d = vars(s)
    return (d["w"],), d["n"]


jax.tree_util.register_pytree_node(Shown, _shown_flatten, lambda n, ch: Shown(ch[0], n - 1))


def test_a_node_whose_class_answers_its_dict_itself_keeps_its_flatten(traced, monkeypatch):
    monkeypatch.setitem(pure_nodes.PURE, _shown_flatten, (DICT,))
    x = jnp.arange(3.0)
    node = Shown(jnp.ones(3), 1)
    check_in_closure(node, x, 1, traced, calls=6)
    object.__setattr__(node, "n", 2)  # what its flatten reads through the class's answer
    check_in_closure(node, x, 2, traced)


def _changed_release(tmp_path):
    """flax's Variable flatten as a release that reads one thing more would have it: the
    same module and name, another source (in a file, so its source can be read)."""
    path = tmp_path / "variablelib.py"
    path.write_text("def _variable_flatten(x):\n    return (x._raw_value, GLOBAL), ()\n")
    spec = importlib.util.spec_from_file_location("changed_variablelib", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    flatten = module._variable_flatten
    flatten.__module__ = "flax.nnx.variablelib"
    return flatten


def test_a_library_flatten_is_trusted_only_with_the_source_that_was_read(tmp_path):
    nnx = pytest.importorskip("flax.nnx")
    from flax.nnx import pytreelib, variablelib

    assert pure_nodes.reads_of(pytreelib.Pytree._pytree__flatten) == (DICT,)
    assert pure_nodes.reads_of(variablelib._variable_flatten)[0] == Slot("_raw_value")
    assert pure_nodes.reads_of(nnx.Linear) is None  # not a declared flatten
    assert pure_nodes.reads_of(_changed_release(tmp_path)) is None


def test_a_library_flatten_trusted_by_name_alone_would_trust_a_changed_release(
    tmp_path, monkeypatch
):
    pytest.importorskip("flax.nnx")
    changed = _changed_release(tmp_path)
    monkeypatch.setattr(pure_nodes, "_digest", lambda text: "1e3e957f02025930")
    pure_nodes._TRUSTED.clear()
    assert pure_nodes.reads_of(changed) is not None  # the check the test above relies on
    pure_nodes._TRUSTED.clear()


def test_an_equinox_flatten_is_trusted_only_with_the_template_that_was_read(monkeypatch):
    eqx = pytest.importorskip("equinox")
    from equinox._module import _flatten

    class Lin(eqx.Module):
        w: jax.Array

    node_flatten = registered_flatten(Lin)
    assert pure_nodes.reads_of(node_flatten) == (DICT,)
    monkeypatch.setattr(_flatten, "_FLAT_CODE", _flatten._FLAT_CODE + "# changed\n")
    pure_nodes._TRUSTED.clear()
    assert pure_nodes.reads_of(node_flatten) is None
    pure_nodes._TRUSTED.clear()
