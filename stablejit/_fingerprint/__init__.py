"""Callable → (static key, dynamic leaves), and back again at trace time.

One idea per file, bottom to top:

- ``code.py``: per code object, a structural digest and what it reads and writes.
- ``places.py``: the places a value can be written to in place (items, attributes, cells, globals).
- ``sinks.py``: side channels, keyed by which object they are.
- ``kind.py``: the ``Kind`` protocol, the key markers and the table of kinds.
- ``parts.py``: a function's children in the one order every walk follows.
- ``guards.py``: what a child of a fast-path record must be (one guard class per kind of child).
- ``guards.py``, ``container_guards.py``: what a record's children must be, each kind's check
  with its generated Python and its C spec side by side.
- ``codegen.py``: a record's guards written as one straight-line Python function.
- ``records.py``: a redefined function's last key, re-checked by its guards (the fast path).
- ``values.py``, ``objects.py``, ``containers.py``, ``callables.py``: the kinds, by family.
- ``classify.py``: which kind a value is (the table filled, user and library kinds).
- ``bake.py``: arrays a trace needs concretely, keyed by contents and baked in.
- ``library.py``: which files are library code (walked by identity, not structure).
- ``walk.py``: the key walk (a value it numbers is kept alive for the walk).
- ``rebuild.py``: the rebuild plan, in-place substitution at trace time.
- ``snapshot.py``: what a trace wrote, made a side channel.
"""
