"""The runtime: options, the cache, trace-time canonical functions, the wrapper.

- ``statics.py``: static arguments, keyed by structure (boxed for ``jax.jit``).
- ``options.py``: ``jax.jit``'s options, written out once, validated and keyed.
- ``jaxcaches.py``: what an entry holds in JAX's own caches, and giving it up.
- ``cache.py``: static key → one long-lived ``jax.jit``; bounded, thread-safe.
- ``argtrees.py``: arguments compared by structure when they carry callables.
- ``canonical.py``: the function JAX traces for an entry (substitutes, side channels).
- ``keys.py``: a call's cache key, built and read back in one place.
- ``persist.py``: executables kept on disk across processes.
- ``miss.py``: a miss: a new entry, or a fallback (static scalars, baked arrays, plain jit).
- ``hot.py``: a redefined closure's own call function, its record's checks written in.
- ``calls.py``: the general call functions (a hit, a first call, a trace's fallback).
- ``jitted.py``: ``StableJitted``, a call function with its callable and options, and its methods.
- ``api.py``: ``stable_jit`` itself, typed.
"""
