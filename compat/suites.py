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
