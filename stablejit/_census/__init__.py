"""The census: what one run did with ``jax.jit``, and what stablejit did about it.

Shared by the pytest plugin (``stablejit.pytest``) and the program runner
(``python -m stablejit run``). It answers "does stablejit help my code, and
is anything left?" by counting, for the whole process:

* the ``jax.jit`` objects created, and per code object the distinct function
  objects that reached ``jax.jit`` (a redefined closure: one code, many
  functions, a trace each under plain ``jax.jit``);
* traces and compiles, from ``jax.monitoring``'s duration events;
* under stablejit, its hits and misses, and why each retrace happened (its
  ``stablejit`` logger records, captured here rather than printed).

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
