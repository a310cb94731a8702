"""A function's attributes on the fast path: every ``functools.wraps`` wrapper has one.

``functools.wraps`` leaves ``__wrapped__`` in the wrapper's ``__dict__``, which is part of the
function's key. A record re-checks that dict after the closure cells, as the walk keys it, so a
decorated closure redefined on every call is served without a walk; an attribute changed,
added or removed is seen by each kind of record checks.
"""

import functools

import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import count_trace as _traced

from stablejit import _native as native
from stablejit import stable_jit

pytestmark = pytest.mark.usefixtures("record_checks")


def _record(f):
    from stablejit._fingerprint.code import code_info

    return code_info(f.__code__).fast.front


def _logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


def _decorated(w):
    @_logged
    def f(x):
        _traced()
        return x * w

    return f


def test_a_decorated_closure_redefined_on_every_call_is_served_by_its_record(
    record_checks, traced, walks
):
    x = jnp.ones(2)
    before = None
    for i in range(8):
        if i == 3:  # the first calls build the record; the rest are served by it
            before = walks()
        w = jnp.full(2, float(i))  # another array of one shape: an input
        jitted = stable_jit(_decorated(w))
        np.testing.assert_array_equal(jitted(x), x * w)
    assert traced() == 1
    assert walks() == before
    record = _record(jitted.__wrapped__)
    assert record is not None and record.attrs is not None
    if record_checks != "interpreted":
        assert jitted._call is record.call is not None
        if record_checks == "native":
            assert type(jitted._call) is native.NATIVE.RecordCall


def _scaled(k, **more):
    def f(x):
        _traced()
        return x * f.scale  # its own attribute, through the cell that holds f

    f.scale = k
    f.__dict__.update(more)
    return f


@pytest.mark.parametrize(
    "change",
    ["value", "attribute added", "attribute removed", "set after wrapping", "wrapped replaced"],
)
def test_an_attribute_changed_is_seen_by_every_kind_of_check(change, traced):
    x = jnp.ones(2)
    for _ in range(6):
        np.testing.assert_array_equal(stable_jit(_scaled(2.0, tag="a"))(x), x * 2.0)
    assert traced() == 1
    k = 2.0
    if change == "value":
        k = 3.0
        f = _scaled(k, tag="a")
    elif change == "attribute added":
        f = _scaled(k, tag="a", other=1)
    elif change == "attribute removed":
        f = _scaled(k)
    elif change == "set after wrapping":
        f = _scaled(k, tag="a")
    else:
        f = _scaled(k, tag="a")
        f.__wrapped__ = _scaled(5.0)
    jitted = stable_jit(f)
    if change == "set after wrapping":
        k = f.scale = 4.0
    np.testing.assert_array_equal(jitted(x), x * k)
    assert traced() == 2
    # The new structure holds as well: its own record serves it from then on.
    for _ in range(4):
        again = _scaled(k, **{n: v for n, v in f.__dict__.items() if n != "scale"})
        np.testing.assert_array_equal(stable_jit(again)(x), x * k)
    assert traced() == 2
