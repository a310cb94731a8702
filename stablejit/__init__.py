"""stablejit: ``jax.jit`` whose cache survives redefinition of the function.

The package's layers, bottom to top (imports only ever point down):

- ``_markers.py``, ``_registry.py``, ``_originals.py``, ``_config.py``,
  ``_native.py``: key markers, the registry of memos, the real
  ``jax.jit``/``lax``, settings, the optional C accelerator (``_speedups_c/``).
- ``_fingerprint/``: callable → (static key, leaves), and back at trace time.
- ``_diagnostics/``: counters, descriptions of keys, retrace explanations.
- ``_runtime/``: options, the cache, canonical functions, persistence, ``stable_jit``.
- Features: ``_loops.py`` (control flow), ``_stable.py`` (closures as pytrees),
  ``_register.py`` (``register_type``), ``_observe.py`` (public counters),
  ``_patch.py`` (patch mode), ``_census/`` (the census tool, for
  ``pytest.py`` and ``__main__.py``).
"""

from ._config import Config, config
from ._diagnostics.describe import Description
from ._diagnostics.explain import RecompileLimitError, RecompileLimitWarning
from ._diagnostics.stats import CacheInfo
from ._fingerprint.records import RecordCheckError
from ._loops import cond, fori_loop, map, scan, switch, while_loop
from ._observe import cache_info, clear_cache, describe, num_traces
from ._patch import patch, unpatch
from ._register import register_type
from ._runtime.api import stable_jit
from ._runtime.jitted import StableJitted
from ._runtime.options import JitOptions
from ._stable import StableFunction, stable

__version__ = "0.1.0"

__all__ = [
    "CacheInfo",
    "Config",
    "Description",
    "JitOptions",
    "RecompileLimitError",
    "RecompileLimitWarning",
    "RecordCheckError",
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
