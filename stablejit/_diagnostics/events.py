"""JAX's trace and compile event names, resolved once for everything that counts them.

``jax.monitoring`` reports each trace and each XLA compilation as a duration
event named by a string constant in ``jax/_src/dispatch.py`` (there since
0.4). The counters (``stats.py``), the census, the tests and the compat
harness all listen for them; they read the names here, so that a rename in
JAX is followed in one place. A missed name counts nothing, silently: eviction
weighs entries by their compiles, and would weigh each one as 1.
"""

from __future__ import annotations

try:
    from jax._src import dispatch as _dispatch
except ImportError:  # a JAX that moved its internals: the names as last spelled
    _dispatch = None


def _resolve(attribute: str, spelled: str) -> str:
    return getattr(_dispatch, attribute, None) or spelled


TRACE = _resolve("JAXPR_TRACE_EVENT", "/jax/core/compile/jaxpr_trace_duration")
"""A ``jax.monitoring`` duration event per trace of a Python function to a jaxpr."""

COMPILE = _resolve("BACKEND_COMPILE_EVENT", "/jax/core/compile/backend_compile_duration")
"""A ``jax.monitoring`` duration event per XLA compilation."""

FROM_JAX = frozenset(
    getattr(_dispatch, attribute)
    for attribute in ("JAXPR_TRACE_EVENT", "BACKEND_COMPILE_EVENT")
    if hasattr(_dispatch, attribute)
)
"""The names above that JAX itself still defines: a zero count of any other
may mean JAX emits it under a new name, not that nothing happened."""
