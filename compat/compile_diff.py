"""Which functions one pytest run compiled more than another, test by test.

    python compat/compile_diff.py STOCK.log MODE.log

Each log is a pytest run with JAX's compile log on and output uncaptured, so
that every ``Compiling <name> with global shapes and types (...)`` line
follows the node id of the test that compiled it::

    JAX_LOG_COMPILES=1 python -m pytest -p no:logging -s -v ...

(with the harness's own command otherwise: see a raw result's ``command``).
Prints the totals, the net difference per compiled function's name, and each
test that compiles more or less, split into JAX's own eager-operation jits
and the programs' functions (named in ``main``'s last argument; a test's
jitted lambdas and numpyro's ``log_likelihood`` and ``log_prob``).
"""

from __future__ import annotations

import collections
import re
import sys

_TEST = re.compile(r"(\S+\.py::\S+)")
_COMPILE = re.compile(r"Compiling (\S+) with global shapes and types (.*?)\. Argument mapping")


def compiles_by_test(path: str) -> dict[str, collections.Counter]:
    """test node id → Counter of ``"<name> <signature>"`` compiled in it."""
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    current = None
    with open(path, errors="replace") as f:
        for line in f:
            m = _TEST.match(line)
            if m:
                current = m.group(1)
            for c in _COMPILE.finditer(line):
                per[current][f"{c.group(1)} {c.group(2)}"] += 1
    return per


def main(base_path: str, other_path: str, program_names: tuple[str, ...]) -> None:
    base, other = compiles_by_test(base_path), compiles_by_test(other_path)
    print(
        f"compiles: {sum(map(sum, (c.values() for c in base.values())))} in {base_path}, "
        f"{sum(map(sum, (c.values() for c in other.values())))} in {other_path}"
    )
    by_name: collections.Counter = collections.Counter()
    rows = []
    for test in sorted(set(base) | set(other), key=str):
        a, b = base.get(test, collections.Counter()), other.get(test, collections.Counter())
        diff = {k: b[k] - a[k] for k in set(a) | set(b) if a[k] != b[k]}
        for k, v in diff.items():
            by_name[k.split(" ")[0]] += v
        if diff:
            programs = sum(v for k, v in diff.items() if k.startswith(program_names))
            rows.append((sum(diff.values()) - programs, programs, test))
    print("net per function name:")
    for name, v in sorted(by_name.items(), key=lambda kv: (-kv[1], kv[0])):
        if v:
            print(f"  {v:+d} {name}")
    counted = [r for r in rows if r[0] or r[1]]
    print(f"tests compiling other signatures as often: {len(rows) - len(counted)}")
    print("tests compiling more or less (JAX's eager jits, the programs' functions):")
    for eager, programs, test in sorted(counted, key=lambda r: r[0] + r[1]):
        print(f"  {eager:+d} {programs:+d} {test}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2], ("jit(<lambda>)", "jit(log_likelihood)", "jit(log_prob)"))
