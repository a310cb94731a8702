"""The census: what one run did with ``jax.jit``, and what stablejit did about it.

Shared by the pytest plugin (``stablejit.pytest``) and the program runner
(``python -m stablejit run``). It answers "does stablejit help my code, and
is anything left?" by counting, for the whole process:

* the ``jax.jit`` objects created, and per code object the distinct function
  objects that reached ``jax.jit`` (a redefined closure: one code, many
  functions, a trace each under plain ``jax.jit``);
* traces and compiles, from ``jax.monitoring``'s duration events;
* per code object, the distinct functions passed to ``jax.lax``'s loops
  (``while_loop``, ``fori_loop``, ``scan``, ``map``, ``cond``, ``switch``)
  at the top level: eager loops are no ``jax.jit`` objects, but a loop body
  redefined on every call traces and compiles its loop each time, as a
  redefined ``jax.jit`` does (and ``--mode patch`` is what helps);
* under stablejit, its hits and misses, per function too (a first call is a
  miss that no retrace explains), why each retrace happened, and every
  fallback to plain ``jax.jit`` with its reason (its ``stablejit`` logger
  records, captured here rather than printed, but for the fallbacks' own
  warnings).

Its parts: ``counts`` (the tallies), ``messages`` (stablejit's log records,
parsed), ``modes`` (what replaces ``jax.jit``: :func:`install`), ``summary``
(the tallies as a dict: :func:`report`) and ``text`` (the dict as text:
:func:`render`). Nothing here is
imported by the rest of stablejit: the census sits on top and may import it
all.
"""

from .modes import MODES, install, installed
from .summary import TOP, report
from .text import render

__all__ = ["MODES", "TOP", "install", "installed", "render", "report"]
