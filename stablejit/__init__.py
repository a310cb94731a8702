"""stablejit: ``jax.jit`` whose cache survives redefinition of the function."""

from ._config import config
from ._describe import Description
from ._explain import RecompileLimitError, RecompileLimitWarning
from ._jit import StableJitted, stable_jit
from ._observe import cache_info, clear_cache, describe, num_traces
from ._stats import CacheInfo

__version__ = "0.1.0"

__all__ = [
    "CacheInfo",
    "Description",
    "RecompileLimitError",
    "RecompileLimitWarning",
    "StableJitted",
    "cache_info",
    "clear_cache",
    "config",
    "describe",
    "num_traces",
    "stable_jit",
]
