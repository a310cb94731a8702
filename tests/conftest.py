import itertools
import logging
import threading

import _agreement
import _helpers
import jax
import pytest

import stablejit
from stablejit import _native as native

# Scripts run as subprocesses by test_sharding.py and test_persistent.py (they need their own JAX
# start-up): not test modules, and not to be imported by --doctest-modules.
collect_ignore = ["_sharding", "_persistent"]


_BUILT = itertools.count()


@pytest.fixture(autouse=True, scope="session")
def _records_proven():
    """Every record the suite builds is proven on the function that built it
    (``config.check_records``: by the walk, then by its call function), and
    its forms are given that function changed at random, which they must
    agree on (see _agreement.py)."""
    from stablejit._fingerprint.records import Record

    build = Record.__dict__["build"]

    def proven(cls, fn, *args):
        record = build.__func__(cls, fn, *args)
        # (Not while other threads run: a trace there puts tracers in the program's own
        # objects for its duration, which one form would see and another not.)
        if record is not None and threading.active_count() == 1:
            _agreement.differential(record, fn, seed=next(_BUILT))
        return record

    stablejit.config.check_records = True
    Record.build = classmethod(proven)
    yield
    Record.build = build
    stablejit.config.check_records = False


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Each test starts from an empty stablejit cache and default config."""
    stablejit.clear_cache()
    size, constants = stablejit.config.cache_size, stablejit.config.numpy_constant_bytes
    yield
    stablejit.config.cache_size = size
    stablejit.config.numpy_constant_bytes = constants
    stablejit.config._persistent_dir = None
    stablejit.clear_cache()


class Traces:
    """Counts traces: call it inside the traced function (a Python side effect)."""

    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytester, whose child runs keep JAX on the CPU: an accelerator such as a TPU
    opens to one process at a time, and this one, the test run, holds it."""
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    return pytester


@pytest.fixture
def traces():
    return Traces()


@pytest.fixture
def limit():
    old = (stablejit.config.recompile_limit, stablejit.config.on_recompile_limit)
    yield stablejit.config
    stablejit.config.recompile_limit, stablejit.config.on_recompile_limit = old


jax.config.update("jax_enable_x64", False)
# The tests compare stablejit's results with eager JAX, NumPy or stock jax.jit, computed
# another way (fused or not, op by op): on a TPU, float32 matmuls at the default precision
# round through bfloat16 and such pairs differ past the tests' tolerances. Full precision
# makes the comparisons about what stablejit computes, on every backend (a CPU's is already).
jax.config.update("jax_default_matmul_precision", "highest")


@pytest.fixture
def traced(record_checks):
    """How many traces ``_helpers.count_trace`` counted since the test began,
    each test run with every kind of record checks."""
    n = len(_helpers.TRACED)
    return lambda: len(_helpers.TRACED) - n


@pytest.fixture(params=["interpreted", "compiled", "native"])
def record_checks(request, monkeypatch):
    """The fast path's records checked guard by guard, or compiled into one
    function at their first match (see stablejit's codegen) — as generated
    Python, or where it can as the C accelerator's call function (see
    stablejit's hot.py): all must mean the same."""
    after = 10**9 if request.param == "interpreted" else 1
    monkeypatch.setattr("stablejit._fingerprint.records.COMPILE_AFTER", after)
    if request.param == "native" and native.NATIVE is None:
        pytest.skip("the C accelerator is not built (or $STABLEJIT_PURE_PYTHON is set)")
    if request.param == "compiled":
        monkeypatch.setattr(native, "NATIVE", None)
    return request.param


@pytest.fixture
def walks(monkeypatch):
    """Counts full walks: calls that the fast path did not serve."""
    import stablejit._runtime.calls as calls

    count = [0]
    real = calls.call_key

    def counting(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    # Where the call functions make their full walk (patched in jitted, as it
    # was, it counted trace() and lower() only, which no test here calls).
    monkeypatch.setattr(calls, "call_key", counting)
    return lambda: count[0]


@pytest.fixture
def explained(caplog):
    """The ``stablejit`` logger's messages so far, with ``config.explain_misses`` on."""
    stablejit.config.explain_misses = True
    caplog.set_level(logging.WARNING, logger="stablejit")
    yield lambda: [r.getMessage() for r in caplog.records if r.name == "stablejit"]
    stablejit.config.explain_misses = False
