"""stablejit: ``jax.jit`` whose cache survives redefinition of the function."""

from ._config import config
from ._describe import Description
from ._explain import RecompileLimitError, RecompileLimitWarning
from ._jit import StableJitted, stable_jit
from ._loops import cond, fori_loop, map, scan, switch, while_loop
from ._observe import cache_info, clear_cache, describe, num_traces
from ._patch import patch, unpatch
from ._register import register_type
from ._stable import StableFunction, stable
from ._stats import CacheInfo

__version__ = "0.1.0"

__all__ = [
    "CacheInfo",
    "Description",
    "RecompileLimitError",
    "RecompileLimitWarning",
    "StableFunction",
    "StableJitted",
    "cache_info",
    "clear_cache",
    "cond",
    "config",
    "describe",
    "fori_loop",
    "map",
    "num_traces",
    "patch",
    "register_type",
    "scan",
    "stable",
    "stable_jit",
    "switch",
    "unpatch",
    "while_loop",
]
