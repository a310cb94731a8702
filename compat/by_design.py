"""What a stablejit mode does differently from stock on purpose, test by test.

Three lists, each entry a test id prefix with its reason and its evidence:
tests that cannot pass under a mode by design (the issue's bound is 1 % of a
suite), tests whose outcome stock itself does not repeat, and tests that
compile more than stock because stock's fewer compiles come from sharing a
program between calls that should not share it. The report lists each apart
from the divergences it counts; anything not listed here is a divergence.
"""

from __future__ import annotations

from compat.suites import base_mode

# Tests that cannot pass under a stablejit mode by design, by suite, mode and
# test id prefix, each with its reason. Listed apart in the summaries and not
# counted as divergences; the bound is 1 % of a suite.
_API = "tests/api_test.py::"
_JAX_BY_DESIGN = {
    _API + "JitTest::test_jit_global_cache": (
        "asserts that a second jit of the same function is not traced again after a variable "
        "its body reads (python_should_be_executing, a closure cell) changed: stablejit keys "
        "closure contents, so it retraces where jax.jit serves the trace made with the old "
        "value (stock's hit would be stale had the body used the value)"
    ),
    _API + "JitTest::test_jit_static_argnums_requires_type_equality": (
        "the same assertion as test_jit_global_cache: the traced body reads a closure cell "
        "the test flips between calls, which stablejit keys"
    ),
    _API + "JitTest::test_omnistaging": (
        "asserts that a tracer leaks into a closed-over list (jax issue 5206): stablejit lifts "
        "the list's key array to an input, and a traced value written over a lifted array is "
        "dropped, the program keeping its array (docs/how-it-works.md), so no tracer leaks; "
        "the random draw is stock's"
    ),
    _API + "TracebackTest::test_jit_traceback": (
        "counts the raw interpreter stack (inspect.stack()) between a call and its traced "
        "body, 6 under jax.jit: stablejit's miss path adds 5 Python frames (its call "
        "function and that one's api boundary, first_call, stage, the canonical function "
        "that rebuilds the user's; with all but that one gone, it alone makes 7). What users "
        "see is filtered as jax.jit's is (tests/test_jit_parity.py: a user's error shows the "
        "user's frames)"
    ),
    _API + "APITest::test_rank_promotion_forces_retrace": (
        "counts traces through a nonlocal counter of a function the test redefines in a "
        "loop, with the same code and the same counter cell: under stablejit the second "
        "definition's first call hits the first's entry, so the counter, reset to 0, stays "
        "0 (identity-keyed caching asserted; a change of jax_numpy_rank_promotion, what the "
        "test is about, retraces under stablejit too: it is part of the key)"
    ),
    _API + "APITest::test_cache_miss_explanations_new_function_in_loop": (
        "asserts JAX's cache-miss explanation of the second of two jax.jit(lambda) calls in a "
        "loop ('another function defined on the same line'): under stablejit the redefined "
        "lambda hits the first one's entry, so there is no miss to explain (the loop "
        "stablejit exists for)"
    ),
    _API + "APITest::test_eval_shape_trace_cache_share": (
        "asserts that jax.jit(f) reuses the trace jax.eval_shape(f) made (JAX's trace "
        "cache is keyed by the function object): jax.eval_shape traces with JAX's own jit, "
        "and stable_jit traces its canonical function, another function object, so f's "
        "body is traced twice, not once; results are stock's. Reusing JAX's trace of f "
        "would serve a trace made before a global f reads was rebound, which stablejit's key "
        "sees and JAX's trace cache does not"
    ),
    _API + "RematTest::test_remat_of_scan_funky_custom_jvp": (
        "counts 'sin' in a printed jaxpr: the custom_jvp rule jits a lambda of the same "
        "code in each of two scans, and under stablejit both calls hit one entry, so both "
        "jit equations hold one traced jaxpr, which JAX's printer prints once and names "
        "twice (let lambda = ...; jit[jaxpr=lambda]); jax.jit traces each lambda, and the "
        "two copies print in full. The program is the same equation for equation"
    ),
}

_EQX_COUNTER = (
    "counts traces through a nonlocal that the custom_vjp's backward rule increments: JAX "
    "runs that rule when it transposes, after stablejit's trace of the jitted function has "
    "returned, so the write is not seen as the trace's own (a trace counter, left out of "
    "the key) but as a variable the function reads rebound between calls, which the next "
    "call keys: it traces again (once more per call, the gradient stock's)"
)
_EQX_BY_DESIGN = {
    "tests/test_ad.py::test_grad_jit_new": _EQX_COUNTER,
    "tests/test_ad.py::test_grad_jit_old": _EQX_COUNTER,
    "tests/test_noinline.py::test_complicated": (
        "counts lowerings through a global that an announce_transform callback increments "
        "while JAX lowers noinline's callback: the lowering runs after stablejit's trace "
        "returned, so the counter the callback's key reads (through the noinline'd function's "
        "closure) reads as rebound between calls and each later call traces and lowers again: "
        "9 lowerings, stock 3 (results stock's)"
    ),
}

BY_DESIGN: dict[str, dict[str, dict[str, str]]] = {
    "jax": {"jit": _JAX_BY_DESIGN, "patch": _JAX_BY_DESIGN},
    "equinox": {"jit": _EQX_BY_DESIGN, "patch": _EQX_BY_DESIGN},
    "numpyro": {
        "patch": {
            "test/test_compile.py::test_mcmc_one_chain": (
                "asserts the exact number of times the model is traced, through a global "
                "counter: under patch(), lax loops given fresh closures of one structure "
                "share one trace, so the model is traced fewer times than stock "
                "(identity-keyed caching asserted)"
            ),
        },
    },
}

# Tests whose outcome stock itself does not repeat, by suite and test id
# prefix, with the evidence: in every mode, a failure of one of them is listed
# apart, not counted as a divergence.
FLAKY: dict[str, dict[str, str]] = {
    "equinox": {
        "tests/test_while_loop.py::test_speed_buffer_while[": (
            "times one jitted program at seven sizes (best of 5 each) and requires every "
            "time ratio to stay within 1.25x the size ratio, on a 2-core machine shared with "
            "other runs: in issue 37's runs it failed once under patch ([False], 1.40) and "
            "once under jit ([True], 1.52), each case passing in the other mode; every call "
            "there is a cache hit of one compiled program, the same computation as stock's"
        ),
        "tests/test_nn.py::test_spectral_norm": (
            "seeds its keys at random (eqxi.GetKey draws a seed from Python's random unless "
            "EQX_GETKEY_SEED is set), and for a few seeds 100 power iterations leave the top "
            "singular value outside allclose's rtol 1e-5: the seed a patch run drew, "
            "1944668764, gives 1.0000628 stock too, eagerly, by hand (0 of 200 other seeds did)"
        ),
    },
    "numpyro": {
        "test/test_distributions.py::test_kl_univariate[": (
            "draws its distributions' parameters from NumPy's global random state, which no "
            "test seeds, and compares an analytic KL with a Monte Carlo estimate at rtol 0.05: "
            "run alone, stock, six times, 1 to 7 of its 15 cases failed each time"
        ),
        "test/test_distributions.py::test_composed_transform_1[": (
            "draws its input from NumPy's global random state, which no test seeds, and "
            "compares two float32 computations of a log-determinant at assert_allclose's "
            "default rtol of 1e-7: run alone, stock, eight times, batch_shape1 failed in four"
        ),
    },
}


_BROWNIAN = (
    "calls path.evaluate(t0, 2.0) with t0 = 0 and then 0.0 (and int32 and float32 arrays) in "
    "each promotion context. equinox's filter_jit passes Python numbers as static "
    "arguments, and jax.jit keys those by == and hash, so 0 and 0.0 share one program "
    "stock. stablejit keys a static value with its type, as a trace can depend on it, and "
    "traces and compiles the second once more (one compile per path and context). Here the "
    "two programs are equal, jaxpr for jaxpr, so stock's sharing is harmless; with t1 = 2 "
    "then 2.0 it is not: stock returns evaluate(0, 2)'s draw, -1.157, for evaluate(0, 2.0), "
    "whose eager value and stablejit's is 2.135 (compat/results/diffrax-compiles.md)"
)

# Tests compiling more than stock by design, by suite and test id prefix.
EXTRA_COMPILES: dict[str, dict[str, str]] = {
    "diffrax": {"test/test_brownian.py::test_shape_and_dtype[": _BROWNIAN},
}


def _reason(table: dict[str, str], test: str) -> str | None:
    return next((reason for prefix, reason in table.items() if test.startswith(prefix)), None)


def by_design(suite: str, mode: str, test: str) -> str | None:
    """The reason ``test`` cannot pass in ``mode`` by design, or does not
    pass reliably stock either (flaky), or None."""
    reason = _reason(BY_DESIGN.get(suite, {}).get(base_mode(mode), {}), test)
    if reason is not None:
        return reason
    flaky = _reason(FLAKY.get(suite, {}), test)
    return None if flaky is None else "flaky stock: " + flaky


def compiles_more_by_design(suite: str, test: str) -> str | None:
    """Why ``test`` compiles more than stock in every stablejit mode, or None."""
    return _reason(EXTRA_COMPILES.get(suite, {}), test)
