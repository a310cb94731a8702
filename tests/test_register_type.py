"""register_type: users declare how their types are fingerprinted."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import count_trace as _traced

from stablejit import register_type, stable_jit
from stablejit._fingerprint.classify import register_user_kind


@pytest.fixture
def restore():
    declared = []
    yield declared.append
    for cls in declared:
        register_user_kind(cls, None)


class Handle:
    def __init__(self, scale):
        self.scale = scale
        self.calls = 0


def _user(h):
    def f(x):
        f.traces.append(1)
        return x * h.scale

    f.traces = _user.traces
    return f


@pytest.fixture
def count():
    _user.traces = []
    return _user.traces


def test_by_default_state_is_read_and_a_counter_in_it_retraces(count):
    h = Handle(2.0)
    for _ in range(3):
        h.calls += 1
        stable_jit(_user(h))(jnp.ones(1))
    assert len(count) == 3


def test_by_key_function_ignores_what_the_key_leaves_out(count, restore):
    register_type(Handle, lambda h: h.scale)
    restore(Handle)
    h = Handle(2.0)
    for _ in range(3):
        h.calls += 1
        np.testing.assert_array_equal(stable_jit(_user(h))(jnp.ones(1)), [2.0])
    h.scale = 3.0
    np.testing.assert_array_equal(stable_jit(_user(h))(jnp.ones(1)), [3.0])
    assert len(count) == 2


def test_by_identity_one_object_one_trace(count, restore):
    register_type(Handle, "identity")
    restore(Handle)
    h, other = Handle(2.0), Handle(2.0)
    for _ in range(3):
        h.calls += 1
        stable_jit(_user(h))(jnp.ones(1))
    stable_jit(_user(other))(jnp.ones(1))
    assert len(count) == 2


def test_a_declaration_covers_subclasses_and_state_restores_the_default(count, restore):
    class Sub(Handle):
        pass

    s = Sub(2.0)
    stable_jit(_user(s))(jnp.ones(1))  # classified by state first
    register_type(Handle, "identity")
    restore(Handle)
    s.calls += 1
    stable_jit(_user(s))(jnp.ones(1))
    assert len(count) == 2  # a new key (identity), then it holds
    s.calls += 1
    stable_jit(_user(s))(jnp.ones(1))
    assert len(count) == 2
    register_type(Handle, "state")
    s.calls += 1
    stable_jit(_user(s))(jnp.ones(1))
    assert len(count) == 3


@pytest.mark.usefixtures("record_checks")
def test_a_declaration_voids_the_fast_paths_built_under_the_kind_it_replaces(traced, restore):
    # A redefined closure's record holds guards its children's kinds chose: an
    # object by identity while its class is declared so. Declared back to
    # state, that record must no longer serve the closure, or a change of
    # state would hit the program traced before it.
    def scaled_by(h):
        def f(x):
            _traced()
            return x * h.scale * h.calls

        return stable_jit(f)

    h, x = Handle(2.0), jnp.ones(1)
    register_type(Handle, "identity")
    restore(Handle)
    for _ in range(4):  # the record is built, then serves
        np.testing.assert_array_equal(scaled_by(h)(x), [0.0])
    register_type(Handle, "state")
    for calls in (1, 1, 2):
        h.calls = calls
        np.testing.assert_array_equal(scaled_by(h)(x), [2.0 * calls])
    assert traced() == 3


@dataclasses.dataclass(frozen=True)
class Frozen:
    n: int


def test_by_value_uses_eq_and_hash(traces, restore):
    register_type(Frozen, "value")
    restore(Frozen)

    def make(n):
        cfg = Frozen(n)

        def f(x):
            traces()
            return x * cfg.n

        return stable_jit(f)

    for n in (2, 2, 3):
        np.testing.assert_array_equal(make(n)(jnp.ones(1)), [float(n)])
    assert traces.n == 2


def test_by_pytree_lifts_the_children(traces, restore):
    class Box:
        def __init__(self, w, tag):
            self.w, self.tag = w, tag

        def __call__(self, x):
            traces()
            return x * self.w

    jax.tree_util.register_pytree_node(
        Box, lambda b: ((b.w,), b.tag), lambda tag, ch: Box(ch[0], tag)
    )
    register_type(Box, "pytree")
    restore(Box)
    for k in (1.0, 2.0, 3.0):
        np.testing.assert_array_equal(stable_jit(Box(jnp.full(1, k), "a"))(jnp.ones(1)), [k])
    assert traces.n == 1


def test_pytree_without_jax_registration_is_a_clear_error(restore):
    class Plain:
        def __call__(self, x):
            return x

    register_type(Plain, "pytree")
    restore(Plain)
    with pytest.raises(TypeError, match="jax.tree_util does not know it"):
        stable_jit(Plain())(jnp.ones(1))


def test_bad_declarations(restore):
    with pytest.raises(TypeError, match="expects a class"):
        register_type(Handle(1), "identity")
    with pytest.raises(ValueError, match="by must be"):
        register_type(Handle, "by value")
    with pytest.raises(TypeError, match="unhashable"):
        register_type(dict, "value")


def test_an_unhashable_key_is_a_clear_error(restore):
    register_type(Handle, lambda h: [h.scale])
    restore(Handle)
    with pytest.raises(TypeError, match="returned an unhashable list"):
        stable_jit(_user(Handle(1.0)))(jnp.ones(1))
