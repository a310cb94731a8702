"""Closures over registered pytree nodes (models) are re-checked node by node, never re-keyed.

A redefined closure over an nnx or equinox model, or any registered pytree node, is served by
its record: each node flattened one level by its registered flatten, its metadata and children
re-checked with the guards of what they were. Every change that changes the walk's key must
miss (a new trace, the result of the changed model); new arrays and equal nodes built anew hit.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import call_in_closure, check_in_closure, eqx_stack, nnx_mlp


class Scaled:
    """A node with one child and its scale as metadata."""

    def __init__(self, w, scale):
        self.w, self.scale = w, scale

    def __call__(self, x):
        return x * self.w * self.scale


class OtherScaled(Scaled):
    """Another node type, flattened the same way."""


class Bag:
    """A node of every attribute it holds (as an nnx Module is): names as metadata."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)

    def __call__(self, x):
        return x * sum(v for v in vars(self).values() if not isinstance(v, str))


for _cls in (Scaled, OtherScaled):
    jax.tree_util.register_pytree_node(
        _cls, lambda s: ((s.w,), s.scale), lambda scale, ch, c=_cls: c(ch[0], scale)
    )
jax.tree_util.register_pytree_node(
    Bag,
    lambda b: (iter(tuple(vars(b).values())), tuple(vars(b))),  # any iterable will do
    lambda names, ch: Bag(**dict(zip(names, ch, strict=True))),
)


def test_a_node_closed_over_hits_without_a_walk_and_sees_new_arrays(traced, walks):
    x = jnp.arange(3.0)
    node = Scaled(jnp.ones(3), 2.0)
    check_in_closure(node, x, 1, traced, calls=6)
    before = walks()
    for i in range(4):
        node.w = jnp.ones(3) * i  # a new array: the same key
        check_in_closure(node, x, 1, traced, calls=1)
    assert walks() == before


def test_changed_metadata_retraces_and_equal_metadata_does_not(traced):
    x = jnp.arange(3.0)
    node = Scaled(jnp.ones(3), 2.0)
    check_in_closure(node, x, 1, traced)
    node.scale = 3.0
    check_in_closure(node, x, 2, traced)
    node.scale = float("3.0")  # equal, another object
    check_in_closure(node, x, 2, traced)
    node.scale = 3  # equal, another type: another key
    check_in_closure(node, x, 3, traced)


def test_a_child_array_swapped_for_a_number_or_none_retraces(traced):
    x = jnp.arange(3.0)
    node = Scaled(jnp.ones(3), 2.0)
    check_in_closure(node, x, 1, traced)
    node.w = 5.0
    check_in_closure(node, x, 2, traced)
    node.w = jnp.ones(3)
    check_in_closure(node, x, 2, traced)  # back to the first key: cached
    node.w = jnp.ones((2, 3))  # another shape: the same key, another trace by JAX's cache
    check_in_closure(node, x, 3, traced)


def test_a_node_of_another_type_retraces(traced):
    x = jnp.arange(3.0)
    check_in_closure(Scaled(jnp.ones(3), 2.0), x, 1, traced)
    check_in_closure(OtherScaled(jnp.ones(3), 2.0), x, 2, traced)
    check_in_closure(Scaled(jnp.ones(3), 2.0), x, 2, traced)  # a new, equal node: a hit


def test_a_node_with_a_field_added_or_removed_retraces(traced, walks):
    x = jnp.arange(3.0)
    bag = Bag(a=jnp.ones(3), b=jnp.ones(3), name="bag")
    check_in_closure(bag, x, 1, traced, calls=6)
    before = walks()
    check_in_closure(bag, x, 1, traced)
    assert walks() == before  # a generator of children is served too
    bag.c = jnp.ones(3)
    check_in_closure(bag, x, 2, traced)
    del bag.c
    bag.name = "other"  # metadata: a static field
    check_in_closure(bag, x, 3, traced)


class Seq:
    """A node of any number of children and no metadata."""

    def __init__(self, *items):
        self.items = items

    def __call__(self, x):
        return sum(item(x) if callable(item) else x * item for item in self.items)


jax.tree_util.register_pytree_node(Seq, lambda s: (s.items, None), lambda _, ch: Seq(*ch))


def test_a_node_with_more_or_fewer_children_under_the_same_metadata_retraces(traced):
    x = jnp.arange(3.0)
    check_in_closure(Seq(jnp.ones(3), jnp.ones(3)), x, 1, traced, calls=6)
    check_in_closure(Seq(jnp.ones(3)), x, 2, traced)
    check_in_closure(Seq(jnp.ones(3), jnp.ones(3), jnp.ones(3)), x, 3, traced)
    check_in_closure(Seq(jnp.ones(3), 2.0), x, 4, traced)


def test_a_node_whose_flatten_makes_its_children_takes_the_walk(traced, walks):
    class Made:
        def __init__(self, w):
            self.w = w

        def __call__(self, x):
            return x * self.w

    # Each flatten makes a new child: no guard can hold it to the walk's, so the walk decides.
    jax.tree_util.register_pytree_node(
        Made, lambda m: ([[m.w]], None), lambda _, ch: Made(ch[0][0])
    )
    x = jnp.arange(3.0)
    node = Made(jnp.full(3, 2.0))
    check_in_closure(node, x, 1, traced)
    before = walks()
    check_in_closure(node, x, 1, traced)
    assert walks() - before == 4


def test_a_static_field_of_an_equinox_module_changed_retraces(traced, walks):
    eqx = pytest.importorskip("equinox")

    class Affine(eqx.Module):
        w: jax.Array
        power: int = eqx.field(static=True)

        def __call__(self, x):
            return (x * self.w) ** self.power

    x = jnp.arange(3.0)
    check_in_closure(Affine(jnp.ones(3), 2), x, 1, traced, calls=6)
    before = walks()
    check_in_closure(Affine(jnp.ones(3) * 2, 2), x, 1, traced)  # a new, equal module: hits
    assert walks() == before
    check_in_closure(Affine(jnp.ones(3), 3), x, 2, traced)


def test_an_nnx_model_closed_over_hits_without_a_walk_and_every_change_retraces(traced, walks):
    nnx = pytest.importorskip("flax.nnx")
    x = jnp.ones((2, 3))
    model = nnx_mlp(nnx, 3)
    check_in_closure(model, x, 1, traced, calls=6)
    before = walks()
    model.layers[1].kernel[...] = jnp.ones((3, 3)) * 0.5  # new arrays: a hit
    check_in_closure(model, x, 1, traced)
    assert walks() == before
    model.power = 2  # a static attribute
    check_in_closure(model, x, 2, traced)
    model.extra = nnx.Param(jnp.ones(3))  # a field added
    check_in_closure(model, x, 3, traced)
    model.layers[2].use_bias, model.layers[2].bias = False, None  # deep in the model
    check_in_closure(model, x, 4, traced)
    model.layers[0] = nnx.LinearGeneral(3, 3, rngs=nnx.Rngs(1))  # a node of another type
    check_in_closure(model, x, 5, traced)


def test_an_equinox_model_closed_over_hits_without_a_walk(traced, walks):
    eqx = pytest.importorskip("equinox")

    Stack = eqx_stack(eqx)
    keys = jax.random.split(jax.random.key(0), 3)
    layers = tuple(eqx.nn.Linear(3, 3, key=k) for k in keys)
    model = Stack(layers, 3)
    x = jnp.ones((2, 3))

    for _ in range(6):
        np.testing.assert_allclose(
            call_in_closure(model, x, vmap=True), jax.vmap(model)(x), rtol=1e-6
        )
    before = walks()
    for _ in range(3):
        np.testing.assert_allclose(
            call_in_closure(model, x, vmap=True), jax.vmap(model)(x), rtol=1e-6
        )
    assert (walks() - before, traced()) == (0, 1)
    for other in (Stack(layers, 2), Stack((*layers[:2], eqx.nn.Identity()), 3)):
        np.testing.assert_allclose(
            call_in_closure(other, x, vmap=True), jax.vmap(other)(x), rtol=1e-6
        )
    assert traced() == 3


def test_a_model_too_large_to_write_out_is_checked_node_by_node(traced, walks):
    # Past the codegen's INLINE_ITEMS: each node's checks are compiled on their own.
    nodes = [Scaled(jnp.ones(3) * i, 1.0) for i in range(150)]
    model = Seq(*nodes)
    x = jnp.arange(3.0)
    check_in_closure(model, x, 1, traced, calls=6)
    before = walks()
    nodes[120].w = jnp.ones(3)
    model = Seq(*nodes)  # a new root over the same nodes, one of them with a new array
    check_in_closure(model, x, 1, traced)
    assert walks() == before
    nodes[140].scale = 2.0  # deep in the model
    check_in_closure(Seq(*nodes), x, 2, traced)
    nodes[140] = OtherScaled(nodes[140].w, 2.0)
    check_in_closure(Seq(*nodes), x, 3, traced)
