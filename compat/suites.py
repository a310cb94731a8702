"""The table: environments, pinned releases, and which upstream tests run.

Everything a reader may want to change lives here: the JAX line of each
environment, the release of each library pinned on it, the test dependencies,
the quick and full selections, and every deselection with its reason.

Paths in selections are relative to a suite's test folder as laid out by
``compat.sources`` (``tests/...`` for blackjax and flax, ``test/...`` for
numpyro; for optax, relative to the installed ``optax`` package, whose wheel
carries its own ``*_test.py`` files).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMPAT = REPO / "compat"
CACHE = COMPAT / ".cache"
ENVS_DIR = COMPAT / ".envs"
# The committed results, which the docs link: written only on purpose (--save, or
# $STABLEJIT_SAVE_RESULTS=1). By default a run writes under the ignored local-results/compat/,
# so running the harness (the test command's quick profile) leaves the checkout clean.
COMMITTED_RESULTS = COMPAT / "results"
LOCAL_RESULTS = REPO / "local-results" / "compat"
SAVE_VARIABLE = "STABLEJIT_SAVE_RESULTS"


def results_root() -> Path:
    """Where raw results and summaries are read and written: see COMMITTED_RESULTS."""
    saving = os.environ.get(SAVE_VARIABLE, "") not in ("", "0")
    return COMMITTED_RESULTS if saving else LOCAL_RESULTS


MODES = ("stock", "jit", "patch")
# jit and patch with stablejit's verify mode on (issue 35): every cache hit traced again and
# compared with the program its entry runs, and a test during which one differed fails, so a
# suite becomes a staleness oracle. A trace per hit costs, so these run only when named.
VERIFY_MODES = ("jit-verify", "patch-verify")
ALL_MODES = MODES + VERIFY_MODES


def base_mode(mode: str) -> str:
    """The mode a verify mode checks (``jit-verify`` → ``jit``): its by-design list."""
    return mode.removesuffix("-verify")


# The quick profile's suites come from sdists, which CI can download; the
# full profile adds suites whose tests are taken from a release tag of the
# upstream repository (JAX's own jit tests, equinox's, diffrax's), which
# only a machine that can reach GitHub, or is handed a clone, can run.
QUICK_SUITES = ("optax", "blackjax", "numpyro", "flax")
SUITES = (*QUICK_SUITES, "jax", "equinox", "diffrax")


@dataclasses.dataclass(frozen=True)
class Env:
    name: str
    python: str | None  # interpreter to build the venv from; None: an existing venv
    jax: str
    pins: dict[str, str]  # suite -> release, checked by a stock run on this line
    venv: Path | None = None  # set for an existing venv the harness does not create

    @property
    def path(self) -> Path:
        return self.venv if self.venv is not None else ENVS_DIR / self.name


# optax 0.2.8 and blackjax 1.7.1 are the newest and support both lines;
# numpyro 0.22.0 needs jax>=0.7; flax 0.12.12 needs jax>=0.11.1 and Python
# 3.12, so the 0.10 line stays on flax 0.12.8 (needs jax>=0.10).
# The tag suites: JAX's tests at the installed release's own tag, equinox
# 0.13.8 and diffrax 0.7.2 (with optimistix 0.1.0 and lineax 0.1.1, the
# newest, which accept jax 0.10.2 and 0.12.0.1) on both lines.
_PINS_010 = {
    "optax": "0.2.8",
    "blackjax": "1.7.1",
    "numpyro": "0.22.0",
    "flax": "0.12.8",
    "jax": "0.10.2",
    "equinox": "0.13.8",
    "diffrax": "0.7.2",
}
ENVS = {
    "py312-jax012": Env(
        "py312-jax012",
        "3.12",
        "0.12.0.1",
        {
            "optax": "0.2.8",
            "blackjax": "1.7.1",
            "numpyro": "0.22.0",
            "flax": "0.12.12",
            "jax": "0.12.0.1",
            "equinox": "0.13.8",
            "diffrax": "0.7.2",
        },
    ),
    "py311-jax010": Env("py311-jax010", "3.11", "0.10.2", dict(_PINS_010)),
    # JAX's own tests on the newer Python at the newest release whose tag the
    # stored mirror of jax-ml/jax holds (its snapshot ends before
    # jax-v0.12.0.1). A release's tests do not import under another (they use
    # jax._src internals that move), so the line pins that release itself.
    "py312-jax011": Env("py312-jax011", "3.12", "0.11.0", {"jax": "0.11.0"}),
    # The project's own development venv (Python 3.11, jax 0.10.2): the quick
    # profile uses it so that CI never installs a second JAX. Missing test
    # dependencies are added with jax held at its installed version.
    "main": Env("main", None, "0.10.2", dict(_PINS_010), venv=REPO / ".venv"),
}
DEFAULT_ENV = {"quick": "main", "full": "py312-jax012"}

# Always installed: the runner and what several suites' tests import.
COMMON_DEPS = ("pytest", "absl-py", "chex", "scipy")


@dataclasses.dataclass(frozen=True)
class Suite:
    name: str
    # "package": the tests ship inside the installed package; "sdist": they
    # are copied out of the source distribution (never the package source,
    # which would shadow the installed one); "git": they are read from the
    # release's tag in the upstream repository (see compat.sources.git_dir).
    source: str
    test_dir: str  # folder (or, for "git", file) copied out ("" for package suites)
    config_files: tuple[str, ...]  # pytest configuration copied beside it
    deps: tuple[str, ...]  # test dependencies (heavy ones, tensorflow/torch, left out)
    quick: tuple[str, ...]  # paths, or nodeids
    quick_k: str | None  # a -k expression narrowing the quick paths
    full: tuple[str, ...]
    deselect: dict[str, str]  # path or nodeid -> why it never runs here
    full_timeout: int  # seconds for one mode of the full profile
    # How --shard divides the suite: "file" (every N-th test file) or "test"
    # (by a hash of each test id), for a suite whose time sits in one file.
    shard_by: str = "file"
    full_k: str | None = None  # a -k expression narrowing the full paths
    # For "git" suites: the upstream repository and its release tag's name.
    repo: str | None = None
    tag: str = "v{version}"


SUITE_TABLE = {
    "optax": Suite(
        "optax",
        source="package",
        test_dir="",
        config_files=(),
        deps=("scikit-learn", "flax"),
        quick=("_src/linesearch_test.py", "_src/alias_test.py"),
        # Both files take minutes whole; these are the cases that run a
        # linesearch (a while_loop over a closure) inside a jitted step, and
        # L-BFGS built on them, without the dtype and optimiser sweeps.
        # Backtracking's test_linesearch alone is 192 cases: one stays.
        quick_k="(BacktrackingLinesearchTest and not dtype_stability and "
        "(not test_linesearch or test_linesearch0 or test_linesearch_update)) "
        "or (ZoomLinesearchTest and not dtype_stability) "
        "or (LBFGSTest and (plain_preconditioning or on_vectors0 or steep_objective "
        "or bad_initialization))",
        full=("",),
        deselect={},
        full_timeout=4 * 3600,
    ),
    "blackjax": Suite(
        "blackjax",
        source="sdist",
        test_dir="tests",
        config_files=("pytest.ini",),
        deps=("optax", "pytest-benchmark"),
        quick=("tests/test_compilation.py",),
        quick_k=None,
        full=("tests",),
        deselect={
            "tests/test_multidevice": "multiple devices (excluded by design)",
            "tests/test_benchmarks.py": "timing benchmarks, not correctness",
        },
        full_timeout=6 * 3600,
    ),
    "numpyro": Suite(
        "numpyro",
        source="sdist",
        test_dir="test",
        config_files=("pyproject.toml",),
        deps=("pyro-api", "scikit-learn", "funsor", "flax", "optax", "equinox", "graphviz"),
        quick=("test/test_compile.py", "test/test_handlers.py"),
        # The slowest handler tests (several seconds each, ~45 s together on
        # 2 cores) add nothing the remaining jit/seed/trace ones do not cover.
        quick_k="not obs_mask and not subsample and not block_seed",
        full=("test",),
        deselect={
            "test/test_examples.py": "runs the examples, which download data sets (network)",
            "test/test_example_utils.py": "downloads data sets (network)",
        },
        full_timeout=6 * 3600,
        # test_distributions.py alone is most of the suite's ~2.5 h per mode.
        shard_by="test",
    ),
    "flax": Suite(
        "flax",
        source="sdist",
        test_dir="tests",
        config_files=("pyproject.toml",),
        deps=("einops", "optax", "cloudpickle", "jaxtyping"),
        quick=("tests/linen/linen_transforms_test.py",),
        quick_k="jit or remat or scan or vmap",
        full=(
            "tests/linen/linen_transforms_test.py",
            "tests/linen/linen_module_test.py",
            "tests/linen/linen_test.py",
            "tests/linen/linen_combinators_test.py",
            "tests/nnx/transforms_test.py",
            "tests/nnx/module_test.py",
            "tests/nnx/optimizer_test.py",
            "tests/nnx/graph_utils_test.py",
            "tests/nnx/rngs_test.py",
        ),
        deselect={},
        full_timeout=4 * 3600,
    ),
    # JAX's own API tests: api_test.py at the installed release's tag, whole
    # (its JitTest class and every test naming jit were 308 of its 861).
    # TracebackTest::test_scan_traceback fails in every mode, stock included:
    # it counts the stack under jax.lax.scan, and the census's counting
    # wrapper around scan (stablejit/_census/modes.py) is one frame more.
    "jax": Suite(
        "jax",
        source="git",
        test_dir="tests/api_test.py",
        config_files=("pyproject.toml", "conftest.py"),
        deps=("absl-py", "hypothesis"),
        quick=(),
        quick_k=None,
        full=("tests/api_test.py",),
        deselect={},
        full_timeout=2 * 3600,
        repo="jax-ml/jax",
        tag="jax-v{version}",
    ),
    "equinox": Suite(
        "equinox",
        source="git",
        test_dir="tests",
        config_files=("pyproject.toml",),
        deps=("beartype", "optax", "jaxtyping"),
        quick=(),
        quick_k=None,
        full=("tests",),
        deselect={
            "tests/test_onnx.py": "exports through tensorflow and jax2onnx (heavy, left out)",
        },
        full_timeout=3 * 3600,
        repo="patrick-kidger/equinox",
    ),
    "diffrax": Suite(
        "diffrax",
        source="git",
        test_dir="test",
        config_files=("pyproject.toml",),
        deps=("beartype", "optax", "scipy", "tqdm", "optimistix", "lineax"),
        quick=(),
        quick_k=None,
        full=("test",),
        deselect={},
        full_timeout=6 * 3600,
        repo="patrick-kidger/diffrax",
    ),
}


def selection(suite: Suite, profile: str) -> tuple[tuple[str, ...], str | None]:
    """The paths and -k expression one profile runs."""
    if profile == "quick":
        return suite.quick, suite.quick_k
    return suite.full, suite.full_k


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


def by_design(suite: str, mode: str, test: str) -> str | None:
    """The reason ``test`` cannot pass in ``mode`` by design, or does not
    pass reliably stock either (flaky), or None."""
    for prefix, reason in BY_DESIGN.get(suite, {}).get(base_mode(mode), {}).items():
        if test.startswith(prefix):
            return reason
    for prefix, reason in FLAKY.get(suite, {}).items():
        if test.startswith(prefix):
            return "flaky stock: " + reason
    return None
