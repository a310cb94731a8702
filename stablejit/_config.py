"""Process-wide settings."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import jax

STANCES = ("log", "warn", "raise", "fallback")


class Config:
    """stablejit's settings; change them through :data:`stablejit.config`.

    Attributes:
        cache_size: the most compiled executables kept across all
            functions that are gone (an entry holds one per argument
            signature it compiled); least recently used entries are
            evicted, and their executables freed, beyond it. A function or
            wrapper still alive keeps its entries, as ``jax.jit`` keeps a
            live function's executables. Default 512, or
            ``$STABLEJIT_CACHE_SIZE``.
        explain_misses: log, through the ``stablejit`` logger, why each
            retrace happened (which closure variable, global, default or
            argument changed, old → new). Costs nothing on cache hits.
            Default off, or ``$STABLEJIT_EXPLAIN_MISSES=1``.
        check_records: prove each fast-path record on the function that
            built it, as TorchDynamo checks a new guard tree on the frame
            that made it: right after it is built, its interpreted checks
            must give the walk's key, arrays and numbering; when its call
            function is installed, that function's checks (generated Python
            or C) must give the same on the function whose match made it.
            A disagreement, a bug of stablejit's, raises
            :class:`stablejit.RecordCheckError`. For tests and debugging: it
            costs a check per record built. Default off, or
            ``$STABLEJIT_CHECK_RECORDS=1``.
        recompile_limit: how many distinct keys of one structure one function
            (all its redefinitions together) may compile before
            ``on_recompile_limit`` applies: keys that differ in values only
            (numbers, strings), as a changing Python float makes them. Keys
            that differ in the functions or containers reached (distinct
            callables meeting one shared piece of code) are not counted
            together. Default 8, or ``$STABLEJIT_RECOMPILE_LIMIT``.
        on_recompile_limit: ``"log"`` (once per function, a warning through
            the ``stablejit`` logger saying what keeps changing; the
            default), ``"warn"`` (the same as a :class:`RecompileLimitWarning`
            through Python's ``warnings``), ``"raise"``
            (:class:`RecompileLimitError`) or ``"fallback"`` (log once, then
            stop caching new variants: call them through a plain
            ``jax.jit``). Or ``$STABLEJIT_ON_RECOMPILE_LIMIT``.
        numpy_constant_bytes: NumPy arrays of at most this many bytes that
            a function reaches (closed over, in defaults, globals, objects)
            are constants, as ``jax.jit`` makes them: concrete inside the
            trace, so NumPy code and Python ``if``s on them run as under
            ``jax.jit``, and keyed by their contents, so writing one in place
            retraces. Larger ones are lifted to inputs: never embedded in
            an executable, new contents never recompile. 0 lifts them all.
            ``jax.Array``s are always lifted. Applies to functions keyed from
            then on. Default 4096, or ``$STABLEJIT_NUMPY_CONSTANT_BYTES``.
        persistent_dir: a directory where compiled executables are kept
            across processes (see ``docs/persistent.md``): a fresh process's
            first call of a known function then skips tracing, lowering and
            compiling. Unless JAX's own persistent compilation cache is
            configured already, it is pointed at ``<dir>/xla`` with every
            compile cached, so the program's other compiles (eager
            operations, plain ``jax.jit``) come from disk too; that part is
            bounded by JAX's ``jax_compilation_cache_max_size``. Default None
            (off), or ``$STABLEJIT_PERSISTENT_DIR``.
        persistent_max_bytes: the most bytes kept there; least recently used
            files go first. Default 2 GiB, or ``$STABLEJIT_PERSISTENT_MAX_BYTES``.
        verify: verify mode, for checking that no hit is stale: the
            probability, in [0, 1], that a cache hit traces the function
            again and compares the program with the one the hit runs (see
            ``docs/verify.md``). A mismatch is logged as an ERROR on the
            ``stablejit`` logger, counted in ``cache_info().mismatches``,
            and the call runs the fresh trace. Costs nothing at 0. Default
            0, or ``$STABLEJIT_VERIFY``.

    Example:
        >>> import stablejit
        >>> stablejit.config.cache_size = 256
        >>> stablejit.config.explain_misses = True
        >>> stablejit.config.cache_size, stablejit.config.explain_misses = 512, False
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._on_cache_size: list[Callable[[int], None]] = []
        self._on_verify: list[Callable[[float], None]] = []
        self._cache_size = _env("STABLEJIT_CACHE_SIZE", 512, _positive_int)
        self._explain_misses = _env("STABLEJIT_EXPLAIN_MISSES", False, _flag)
        self._check_records = _env("STABLEJIT_CHECK_RECORDS", False, _flag)
        self._recompile_limit = _env("STABLEJIT_RECOMPILE_LIMIT", 8, _positive_int)
        self._on_recompile_limit = _env("STABLEJIT_ON_RECOMPILE_LIMIT", "log", _stance)
        self._numpy_constant_bytes = _env("STABLEJIT_NUMPY_CONSTANT_BYTES", 4096, _count)
        self._persistent_max_bytes = _env("STABLEJIT_PERSISTENT_MAX_BYTES", 2 << 30, _positive_int)
        self._verify = _env("STABLEJIT_VERIFY", 0.0, _probability)
        self._persistent_dir = None
        directory = _env("STABLEJIT_PERSISTENT_DIR", None, _directory)
        if directory is not None:
            self.persistent_dir = directory

    @property
    def cache_size(self) -> int:
        return self._cache_size

    @cache_size.setter
    def cache_size(self, value: int) -> None:
        value = _check_int("cache_size", value)
        with self._lock:
            self._cache_size = value
            watchers = list(self._on_cache_size)
        for fn in watchers:
            fn(value)

    def on_cache_size(self, fn: Callable[[int], None]) -> None:
        """Calls ``fn(new_size)`` whenever ``cache_size`` is set (the cache
        shrinks itself at once)."""
        with self._lock:
            self._on_cache_size.append(fn)

    @property
    def verify(self) -> float:
        return self._verify

    @verify.setter
    def verify(self, value: float) -> None:
        value = _check_probability("verify", value)
        with self._lock:
            self._verify = value
            watchers = list(self._on_verify)
        for fn in watchers:
            fn(value)

    def on_verify(self, fn: Callable[[float], None]) -> None:
        """Calls ``fn(p)`` whenever ``verify`` is set (the cache's entries
        are served with or without their sampling then)."""
        with self._lock:
            self._on_verify.append(fn)

    @property
    def explain_misses(self) -> bool:
        return self._explain_misses

    @explain_misses.setter
    def explain_misses(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"explain_misses must be a bool, got {type(value).__name__}")
        self._explain_misses = value

    @property
    def check_records(self) -> bool:
        return self._check_records

    @check_records.setter
    def check_records(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"check_records must be a bool, got {type(value).__name__}")
        self._check_records = value

    @property
    def recompile_limit(self) -> int:
        return self._recompile_limit

    @recompile_limit.setter
    def recompile_limit(self, value: int) -> None:
        self._recompile_limit = _check_int("recompile_limit", value)

    @property
    def on_recompile_limit(self) -> str:
        return self._on_recompile_limit

    @on_recompile_limit.setter
    def on_recompile_limit(self, value: str) -> None:
        if value not in STANCES:
            raise ValueError(f"on_recompile_limit must be one of {STANCES}, got {value!r}")
        self._on_recompile_limit = value

    @property
    def numpy_constant_bytes(self) -> int:
        return self._numpy_constant_bytes

    @numpy_constant_bytes.setter
    def numpy_constant_bytes(self, value: int) -> None:
        self._numpy_constant_bytes = _check_int("numpy_constant_bytes", value, least=0)

    @property
    def persistent_dir(self) -> str | None:
        return self._persistent_dir

    @persistent_dir.setter
    def persistent_dir(self, value: str | os.PathLike | None) -> None:
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise TypeError(f"persistent_dir must be a path or None, got {type(value).__name__}")
        self._persistent_dir = None if value is None else _directory(os.fspath(value))
        if self._persistent_dir is not None:
            _use_jax_cache(os.path.join(self._persistent_dir, "xla"))

    @property
    def persistent_max_bytes(self) -> int:
        return self._persistent_max_bytes

    @persistent_max_bytes.setter
    def persistent_max_bytes(self, value: int) -> None:
        self._persistent_max_bytes = _check_int("persistent_max_bytes", value)

    def __repr__(self):
        return (
            f"stablejit.Config(cache_size={self._cache_size}, "
            f"explain_misses={self._explain_misses}, "
            f"recompile_limit={self._recompile_limit}, "
            f"on_recompile_limit={self._on_recompile_limit!r}, "
            f"numpy_constant_bytes={self._numpy_constant_bytes}, "
            f"persistent_dir={self._persistent_dir!r}, "
            f"persistent_max_bytes={self._persistent_max_bytes}, "
            f"verify={self._verify})"
        )


def _use_jax_cache(directory: str) -> None:
    """Points JAX's persistent compilation cache at ``directory``, caching
    every compile, unless the user configured that cache already."""

    if jax.config.jax_compilation_cache_dir is not None:
        return
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


def _check_int(name: str, value, least: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < least:
        raise ValueError(f"{name} must be at least {least}, got {value}")
    return value


def _check_probability(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number in [0, 1], got {type(value).__name__}")
    if not 0 <= value <= 1:  # (NaN fails too)
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return float(value)


def _probability(raw: str) -> float:
    return _check_probability("it", float(raw))


def _positive_int(raw: str) -> int:
    return _check_int("it", int(raw))


def _count(raw: str) -> int:
    return _check_int("it", int(raw), least=0)


def _flag(raw: str) -> bool:
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("expected 1/0, true/false, yes/no or on/off")


def _directory(raw: str) -> str:
    if not raw:
        raise ValueError("expected a directory path")
    if os.path.exists(raw) and not os.path.isdir(raw):
        raise ValueError(f"{raw!r} exists and is not a directory")
    return os.path.abspath(raw)


def _stance(raw: str) -> str:
    if raw not in STANCES:
        raise ValueError(f"expected one of {STANCES}")
    return raw


def _env(name: str, default, parse):
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return parse(raw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"${name}={raw!r} is not valid: {e}") from None


config = Config()
