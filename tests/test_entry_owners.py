"""A cache entry's fields each have one writer: the module that owns that part of it.

``stablejit._runtime.cache.Entry`` is read everywhere and written in four parts, each by one
module: the cache (its ``jax.jit``, what the hot path calls, its keys, its eviction ``policy``),
the diagnostics (its ``counts``), the trace-time warnings (``warned``), and the hot path (its
``hits``). These tests read the package's source for every assignment to an entry's fields (as
the code names entries: ``entry``, ``e``, and their ``counts``, ``policy`` and ``warned``) and
require it in its owner's module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import stablejit

PACKAGE = Path(stablejit.__file__).parent

OWNER = {
    "cache.py": {"jitted", "ready", "keys", "tag", "policy", "counts", "warned"},
    "policy": {"cache.py"},
    "counts": {"stats.py"},
    "warned": {"trace_warnings.py"},
}
HITS = {"cache.py", "calls.py", "hot.py"}  # made, counted on the hot path (and by the C one)


def _writes():
    """``(module file name, part, field, line)`` of each write to an entry's field."""
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in _each(targets):
                if isinstance(target, ast.Attribute):
                    part = _part(target.value)
                    if part is not None:
                        yield path.name, part, target.attr, node.lineno


def _each(targets):
    """The assigned places of ``targets`` (through tuples and lists: ``a, b = ...``)."""
    for t in targets:
        if isinstance(t, ast.Tuple | ast.List):
            yield from _each(t.elts)
        else:
            yield t


def _part(value) -> str | None:
    """Which part of an entry ``value`` names: "entry" itself, or one of its parts."""
    if isinstance(value, ast.Name) and value.id in ("entry", "e"):
        return "entry"
    if isinstance(value, ast.Attribute) and value.attr in ("counts", "policy", "warned"):
        return value.attr if _part(value.value) == "entry" else None
    return None


def test_each_write_to_an_entry_is_in_the_module_that_owns_that_part():
    wrong = []
    writes = list(_writes())
    for module, part, field, line in writes:
        if part == "entry":
            ok = module in HITS if field == "hits" else module == "cache.py"
            ok = ok and (field == "hits" or field in OWNER["cache.py"])
        else:
            ok = module in OWNER[part]
        if not ok:
            wrong.append(
                f"{module}:{line} writes entry{'' if part == 'entry' else '.' + part}.{field}"
            )
    assert wrong == []
    # The scan sees the writes it is about (a scan that finds nothing proves nothing).
    parts = {(module, part) for module, part, _, _ in writes}
    assert {("stats.py", "counts"), ("cache.py", "policy"), ("calls.py", "entry")} <= parts


def test_the_parts_are_made_with_the_entry():
    from stablejit._runtime.cache import Entry

    entry = Entry(("key",), "tag")
    assert (entry.hits, entry.counts.traces, entry.warned.callers, entry.policy.owner) == (
        0,
        0,
        None,
        None,
    )
