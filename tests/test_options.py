"""stable_jit's options: one list, mirrored by the signature; memos bounded and cleared."""

import inspect

import jax.numpy as jnp
import pytest

import stablejit
from stablejit import stable_jit
from stablejit._registry import Memo
from stablejit._runtime.options import DEFAULTS, JitOptions


def test_the_signature_lists_every_option_with_its_default():
    params = inspect.signature(stable_jit).parameters
    assert list(params)[0] == "fun"
    assert {k: p.default for k, p in list(params.items())[1:]} == DEFAULTS
    assert set(JitOptions.__annotations__) == set(DEFAULTS)


def test_an_unknown_option_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="static_argnum"):
        stable_jit(lambda x: x, static_argnum=0)


def test_options_given_at_their_defaults_share_the_entry_of_none(traces):
    def f(x):
        traces()
        return x + 1

    stable_jit(f)(jnp.ones(2))
    stable_jit(f, keep_unused=False, static_argnums=None, lift_scalars=False)(jnp.ones(2))
    assert traces.n == 1


def test_a_memo_keeps_its_newest_items_up_to_its_size():
    memo = Memo(2)
    for i in range(3):
        memo.put(i, str(i))
    assert dict(memo) == {1: "1", 2: "2"}


def test_clear_cache_empties_every_memo():
    memo = Memo(8)
    memo.put("k", 1)
    stablejit.clear_cache()
    assert not memo
