"""At trace time the traced function sees the program's own objects, as under jax.jit."""

import sys
import traceback
import unittest

import jax
import jax.numpy as jnp
import numpy as np
import pytest

try:
    from jax.extend.core import get_opaque_trace_state
except ImportError:  # JAX before 0.7 has it in jax.core only
    from jax.core import get_opaque_trace_state

from stablejit import stable_jit


class Held:
    """A pytree node that holds its child in an attribute (a flax.struct, an nnx Object)."""

    def __init__(self, w):
        self.w = w


jax.tree_util.register_pytree_node(Held, lambda h: ((h.w,), None), lambda _, c: Held(c[0]))


class Slotted:
    """A pytree node with slots (an nnx Variable)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


jax.tree_util.register_pytree_node(
    Slotted, lambda s: ((s.value,), None), lambda _, c: Slotted(c[0])
)


class Computed:
    """A pytree node whose child is computed by its flatten, not held."""

    def __init__(self, wt):
        self.wt = wt


jax.tree_util.register_pytree_node(
    Computed, lambda c: ((c.wt.T,), None), lambda _, ch: Computed(ch[0].T)
)


@pytest.mark.parametrize("make", [Held, Slotted], ids=["attribute", "slot"])
def test_a_closed_over_pytree_node_is_the_very_object_while_traced(make, traces):
    seen = []

    def run(node):
        def f(x):
            traces()
            seen.append(node)
            return x * (node.w if make is Held else node.value)

        return stable_jit(f)(jnp.ones(2))

    a, b = make(jnp.full(2, 2.0)), make(jnp.full(2, 3.0))
    np.testing.assert_allclose(run(a), [2.0, 2.0])
    np.testing.assert_allclose(run(b), [3.0, 3.0])  # a new node's arrays: lifted, no retrace
    assert seen == [a] and traces.n == 1
    held = a.w if make is Held else a.value
    assert not isinstance(held, jax.core.Tracer)  # its array is back after the trace


def test_a_node_refusing_updates_from_an_inner_trace_refuses_them_as_under_jax_jit():
    class Guarded(Slotted):
        __slots__ = ("level",)

        def __init__(self, value):
            super().__init__(value)
            self.level = get_opaque_trace_state()

        def bump(self):
            if self.level != get_opaque_trace_state():
                raise RuntimeError("updated from another trace")
            self.value = self.value + 1

    jax.tree_util.register_pytree_node(
        Guarded, lambda g: ((g.value,), None), lambda _, c: Guarded(c[0])
    )
    g = Guarded(jnp.zeros(2))

    def f():
        g.bump()

    for jit in (jax.jit, stable_jit):
        with pytest.raises(RuntimeError, match="another trace"):
            jit(f)()


def test_a_write_into_a_copied_node_is_refused_not_lost():
    c = Computed(jnp.ones((2, 3)))

    def f(x):
        c.wt = c.wt * 2
        return x

    with pytest.raises(TypeError, match="inside a copy"):
        stable_jit(f)(jnp.ones(2))


def test_a_closed_over_computed_node_is_rebuilt_around_its_leaves():
    c = Computed(jnp.arange(6.0).reshape(2, 3))
    np.testing.assert_allclose(stable_jit(lambda: c.wt.sum(0))(), c.wt.sum(0))


class _Case(unittest.TestCase):
    def runTest(self):  # noqa: N802 - unittest's name
        pass


def test_unittest_bookkeeping_on_a_test_case_is_not_keyed(traces):
    case = _Case()
    case.scale = 2.0

    def run():
        def f(x):
            traces()
            return x * case.scale

        return stable_jit(f)(jnp.ones(2))

    deep = ()
    for _ in range(sys.getrecursionlimit() * 2):  # the test runner's state: never walked
        deep = (deep,)
    case._outcome = deep
    np.testing.assert_allclose(run(), [2.0, 2.0])
    case._outcome = ((),)
    run()
    assert traces.n == 1
    case.scale = 3.0  # what the test set up is keyed
    np.testing.assert_allclose(run(), [3.0, 3.0])
    assert traces.n == 2


def test_an_array_on_a_test_case_is_lifted_and_the_case_itself_is_traced(traces):
    case = _Case()
    case.w = jnp.ones(2)
    seen = []

    def run():
        def f(x):
            traces()
            seen.append(case.w)
            return x * case.w

        return stable_jit(f)(jnp.ones(2))

    original = case.w
    np.testing.assert_allclose(run(), [1.0, 1.0])
    assert isinstance(seen[-1], jax.core.Tracer)  # lifted, on the object itself
    assert case.w is original  # and put back after the trace
    case.w = jnp.ones(2) * 5.0
    np.testing.assert_allclose(run(), [5.0, 5.0])
    assert traces.n == 1


def test_a_counter_a_trace_bumps_on_a_test_case_is_a_side_channel():
    case = _Case()
    case.traces = 0

    def run(x):
        def f(x):
            case.traces += 1  # the only side effect: were it keyed, every call would retrace
            return x * 2

        return stable_jit(f)(x)

    for _ in range(3):
        np.testing.assert_allclose(run(jnp.ones(2)), [2.0, 2.0])
    assert case.traces == 1  # as under jax.jit: one trace
    run(jnp.ones(3))
    assert case.traces == 2


def test_a_structure_that_keys_near_the_recursion_limit_also_traces():
    import stablejit

    n = 150
    chain = (jnp.ones(2),)
    for _ in range(n):
        chain = (chain,)

    def f(x):
        c = chain
        while isinstance(c[0], tuple):
            c = c[0]
        return x + c[0]

    # Sweep the recursion limit across the depth the key walk needs: where
    # the walk fits, the trace-time walks (under JAX's tracing, deeper down
    # the stack) must fit too; where it does not, plain jax.jit runs.
    base = len(traceback.extract_stack())
    limit = sys.getrecursionlimit()
    keyed = 0
    try:
        for margin in range(0, 400, 5):
            stablejit.clear_cache()
            sys.setrecursionlimit(base + 3 * n + margin)
            out = stable_jit(f)(jnp.ones(2))
            keyed += stablejit.cache_info().traces
            np.testing.assert_allclose(out, [2.0, 2.0])
    finally:
        sys.setrecursionlimit(limit)
    assert keyed
