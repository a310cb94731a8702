"""stablejit: ``jax.jit`` whose cache survives redefinition of the function."""

from ._config import config
from ._jit import StableJitted, stable_jit

__version__ = "0.1.0"

__all__ = ["StableJitted", "config", "stable_jit"]
