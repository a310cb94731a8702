"""Diagnostics: called on the slow paths, importing nothing above the fingerprint.

- ``events.py``: the names of JAX's trace and compile events, read from JAX.
- ``stats.py``: counters per function (all its redefinitions) and overall.
- ``describe.py``: the parts of a key in the user's names, and how two keys differ.
- ``explain.py``: why a call retraced (the ``stablejit`` logger) and the recompile limit.
"""
