"""The cache: bounded, thread-safe, holding no user arrays."""

import functools
import gc
import threading
import weakref

import _helpers
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import pjit
from jax._src import util as jax_util

import stablejit
from stablejit import stable_jit
from stablejit._runtime import cache as _cache


def test_concurrent_first_calls_trace_once():
    seen = []

    def make():
        def inner(x):
            seen.append(1)  # atomic, unlike a counter
            return jnp.sin(x) * 2

        return stable_jit(inner)

    barrier = threading.Barrier(8)
    results, errors = [], []

    def worker(i):
        try:
            barrier.wait()
            for _ in range(20):
                results.append(np.asarray(make()(jnp.full(3, float(i)))))
        except Exception as e:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 160
    assert seen == [1]


def test_concurrent_calls_with_different_keys_get_their_own_results():
    def make(k):
        return stable_jit(lambda x: x * k)

    out = {}

    def worker(k):
        out[k] = [float(make(k)(jnp.ones(()))) for _ in range(10)]

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {k: [float(k)] * 10 for k in range(6)}


def test_closed_over_arrays_are_freed():
    # (Lifted arrays: above numpy_constant_bytes, or a jax.Array. A small
    # numpy array is a constant, which the executable holds, as jax.jit's does.)
    def run():
        w = np.ones(10_000, np.float32)
        ref = weakref.ref(w)

        def inner(x):
            return x + w

        stable_jit(inner)(np.zeros(10_000, np.float32))
        return ref

    ref = run()
    gc.collect()
    assert ref() is None
    assert stablejit.cache_info().entries == 1


def test_closed_over_objects_are_freed():
    class Model:
        def __init__(self):
            self.w = jnp.ones(3)

    def run():
        m = Model()
        ref = weakref.ref(m)
        stable_jit(lambda x: x * m.w)(jnp.ones(3))
        return ref

    ref = run()
    gc.collect()
    assert ref() is None


def _adder(traces, k):
    """A closure over ``k``, redefined on every call."""

    def inner(x):
        traces()
        return x + k

    return stable_jit(inner)


def _used_twice(make, k):
    """A variant called by two functions of one code: reused, off probation."""
    make(k)(jnp.zeros(1))
    make(k)(jnp.zeros(1))


def test_cache_is_bounded_and_least_recently_used_is_evicted(traces):
    stablejit.config.cache_size = 3

    make = functools.partial(_adder, traces)

    for k in range(5):
        _used_twice(make, k)
    assert stablejit.cache_info().entries == 3
    assert traces.n == 5
    make(4)(jnp.zeros(1))  # most recent: still cached
    assert traces.n == 5
    np.testing.assert_array_equal(make(0)(jnp.zeros(1)), [0.0])  # evicted: traced again
    assert traces.n == 6


def test_variants_never_used_again_are_held_to_a_quarter_of_the_bound(traces):
    stablejit.config.cache_size = 8
    make = functools.partial(_adder, traces)
    for k in range(4):  # reused by a second closure each
        _used_twice(make, k)
    for k in range(4, 10):  # made once, their closures gone
        make(k)(jnp.zeros(1))
    assert traces.n == 10
    # The reused four, two of the others (a quarter of 8) and the newest, made
    # since the last eviction.
    assert stablejit.cache_info().entries == 4 + 2 + 1
    for k in (0, 1, 2, 3, 7, 8, 9):
        make(k)(jnp.zeros(1))
    assert traces.n == 10
    make(4)(jnp.zeros(1))
    assert traces.n == 11


def test_the_bound_counts_executables_so_an_entry_compiled_for_many_shapes_weighs_more(traces):
    stablejit.config.cache_size = 3
    make = functools.partial(_adder, traces)
    for n in (1, 2, 3):  # one entry, three executables
        make(0)(jnp.zeros(n))
    assert (stablejit.cache_info().entries, traces.n) == (1, 3)
    make(1)(jnp.zeros(1))  # a fourth executable: the older entry goes
    assert stablejit.cache_info().entries == 1
    np.testing.assert_array_equal(make(0)(jnp.zeros(1)), [0.0])
    assert traces.n == 5  # evicted: traced again


def test_a_live_function_keeps_its_variants_past_the_bound_as_jax_jit_does(traces):
    stablejit.config.cache_size = 2

    def f(x):
        traces()
        return x * 2

    g = stable_jit(f)
    make = functools.partial(_adder, traces)
    for n in range(1, 6):  # five executables of a function still alive
        g(jnp.zeros(n))
    for k in range(4):  # closures that die: bounded
        make(k)(jnp.zeros(1))
    assert traces.n == 9
    for n in range(1, 6):
        np.testing.assert_array_equal(g(jnp.ones(n)), 2 * np.ones(n))
    assert traces.n == 9  # none evicted
    make(0)(jnp.zeros(1))
    assert traces.n == 10  # a dead closure's entry was
    del f, g  # now its entry may go too
    make(1)(jnp.zeros(1))
    assert sum(max(1, e.counts.compiles) for e in _cache.live_entries()) <= 2


def test_shrinking_the_cache_evicts_immediately():
    for k in range(4):
        for _ in range(2):
            stable_jit(lambda x, k=k: x + k)(jnp.zeros(1))
    assert stablejit.cache_info().entries == 4
    stablejit.config.cache_size = 2
    assert stablejit.cache_info().entries == 2


def test_a_hit_makes_an_entry_recently_used(traces):
    stablejit.config.cache_size = 3

    make = functools.partial(_adder, traces)

    for k in (0, 1, 2):
        _used_twice(make, k)
    _used_twice(make, 3)  # evicts 0, the first made
    make(1)(jnp.zeros(1))  # hit: 1 is now the most recently used
    _used_twice(make, 4)  # evicts 2, the least recently used
    assert traces.n == 5
    for k in (1, 3, 4):
        make(k)(jnp.zeros(1))
    assert traces.n == 5
    make(2)(jnp.zeros(1))
    assert traces.n == 6


def test_deleted_namespaces_and_functions_are_freed():
    class Sentinel:
        pass

    def run():
        ns = {"SENTINEL": Sentinel(), "T": []}
        exec("K = 2\ndef f(x):\n    T.append(1)\n    return x * K\n", ns)
        for _ in range(3):  # the slow path, then the fast path
            stable_jit(ns["f"])(jnp.ones(2))
        return weakref.ref(ns["SENTINEL"]), weakref.ref(ns["f"]), weakref.ref(ns["f"].__code__)

    sentinel, fn, code = run()
    gc.collect()
    assert fn() is None
    assert sentinel() is None  # the globals dict died with it
    stablejit.clear_cache()  # JAX's traced program referenced the code object
    gc.collect()
    assert code() is None


def test_ten_thousand_fresh_closures_over_fresh_arrays_keep_one_entry_and_no_arrays():
    refs = []

    def outer(i):
        w = np.full(2048, i, np.float32)  # above numpy_constant_bytes: lifted
        refs.append(weakref.ref(w))

        def inner(x):
            return x + w

        return stable_jit(inner)(np.zeros(2048, np.float32))

    for i in range(10_000):
        out = outer(i)
    np.testing.assert_array_equal(out, np.full(2048, 9999.0))
    gc.collect()
    assert stablejit.cache_info().entries == 1
    assert sum(r() is not None for r in refs) == 0


def _jax_slots() -> int:
    """How many traces and lowerings JAX's own caches hold, for every
    ``jax.jit`` in the process (bounded caches that stablejit shares)."""
    return pjit._infer_params_cached.cache_info().currsize + pjit._pjit_lower.cache_info().currsize


def test_a_variant_on_probation_leaves_jaxs_dispatch_cache_but_keeps_its_executable(traces):
    make = functools.partial(_adder, traces)
    compiled = len(_helpers.COMPILED)
    make(0)(jnp.zeros(1))  # its closure gone: on probation
    assert len(_helpers.COMPILED) > compiled  # the compile counter sees compiles
    (entry,) = _cache.live_entries()
    assert entry.jitted._cache_size() == 1
    stablejit.config.cache_size = stablejit.config.cache_size  # an eviction pass
    assert entry.jitted._cache_size() == 0
    compiled = len(_helpers.COMPILED)
    np.testing.assert_array_equal(make(0)(jnp.ones(1)), [1.0])
    # Found through JAX's Python path: neither traced nor compiled again, and
    # back in the dispatch cache.
    assert (traces.n, len(_helpers.COMPILED)) == (1, compiled)
    assert entry.jitted._cache_size() == 1
    np.testing.assert_array_equal(jax.jit(lambda x: make(0)(x))(jnp.ones(1)), [1.0])
    assert traces.n == 1


@pytest.mark.skipif(
    not hasattr(jax_util, "_caches"), reason="this JAX keeps no registry of its caches"
)
def test_dropping_a_variant_leaves_other_functions_in_jaxs_caches(traces):
    jitted = jax.jit(lambda x: x * 2)
    jitted(jnp.ones(2))
    make = functools.partial(_adder, traces)
    make(0)(jnp.zeros(1))
    before = _jax_slots()
    stablejit.clear_cache()
    # Only the variant's own slots went (jax.jit's clear_cache() empties the
    # cache of inferred parameters for every function).
    assert _jax_slots() == before - 2
