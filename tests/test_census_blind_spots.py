"""The census has no blind spots: every fallback with its reason and count, eager jax.lax
loops counted by their bodies' code (with a pointer to --mode patch), and stablejit's misses
per function (a first call is a miss no retrace explains)."""

import json
import subprocess
import sys
import textwrap

import pytest
from _helpers import child_env

# A step function that cannot be keyed (what it reaches is deeper than a key can be walked),
# redefined and jitted on each of 6 calls.
UNKEYABLE = """
import sys
import jax, jax.numpy as jnp

deep = None
for _ in range(2 * sys.getrecursionlimit()):
    deep = [deep]

def train(x):
    def step(x):
        return x * 2 + (deep is not None)
    return jax.jit(step)(x)

x = jnp.ones(3)
for _ in range(6):
    x = train(x)
"""

# Eager jax.lax loops whose bodies are redefined on each of 5 calls: no jax.jit anywhere.
LOOPS = """
import jax, jax.numpy as jnp

def count_to(n, x):
    def cond(state):
        return state[0] < n
    def body(state):
        i, acc = state
        return i + 1, acc + x
    return jax.lax.while_loop(cond, body, (0, jnp.zeros_like(x)))

def cumsum(xs):
    def step(c, y):
        return c + y, c
    return jax.lax.scan(step, 0.0, xs)

for _ in range(5):
    count_to(3, jnp.ones(2))
    cumsum(jnp.arange(4.0))
"""

# The same loop bodies redefined, but inside a jitted function traced for 3 shapes, under vmap,
# and under jax.disable_jit(): each loop is compiled with its program, or not at all.
TRACED_LOOPS = """
import jax, jax.numpy as jnp

def count_to(n, x):
    def body(i, acc):
        return acc + x
    return jax.lax.fori_loop(0, n, body, jnp.zeros_like(x))

f = jax.jit(count_to, static_argnums=0)
for size in (1, 2, 3):
    f(3, jnp.ones(size))
jax.vmap(lambda x: count_to(3, x))(jnp.ones((2, 2)))
jax.vmap(lambda x: count_to(3, x))(jnp.ones((2, 2)))
with jax.disable_jit():
    count_to(3, jnp.ones(2))
    count_to(3, jnp.ones(2))
"""

# A closed-over array needed as a concrete value (a Python if): baked in, keyed by contents.
BAKED = """
import jax, jax.numpy as jnp

flag = jnp.array(True)

def f(x):
    return x * 2 if flag else x

jax.jit(f)(jnp.ones(2))
"""


def run(tmp_path, source, mode):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source))
    report = tmp_path / "census.json"
    proc = subprocess.run(
        [sys.executable, "-m", "stablejit", "run", "--mode", mode, "--report", str(report)]
        + [str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=child_env(),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr, json.loads(report.read_text())


@pytest.mark.parametrize("mode", ["jit", "patch"])
def test_a_fallback_shows_with_its_reason_and_traces(tmp_path, mode):
    err, data = run(tmp_path, UNKEYABLE, mode)
    [fallback] = data["fallbacks"]
    assert fallback["function"] == "stable_jit(train.<locals>.step) at prog.py:10"
    assert fallback["reason"].startswith("plain jax.jit: cannot be keyed (maximum recursion")
    assert fallback["traces"] == 6
    assert "stablejit fell back" in err
    # RecursionError's own words vary with Python's version ("... while calling a Python object").
    [line] = [line for line in err.splitlines() if "plain jax.jit: cannot be keyed" in line]
    assert "cannot be keyed (maximum recursion depth exceeded" in line
    assert line.endswith(")  (6 traces)")


def test_eager_loops_are_counted_by_their_bodies_code(tmp_path):
    err, data = run(tmp_path, LOOPS, "off")
    rows = {r["code"]: r for r in data["redefined_loops"]}
    assert set(rows) == {"count_to.<locals>.cond", "count_to.<locals>.body", "cumsum.<locals>.step"}
    body = rows["count_to.<locals>.body"]
    assert (body["loop"], body["function_objects"], body["loop_calls"]) == ("while_loop", 5, 5)
    assert rows["cumsum.<locals>.step"]["loop"] == "scan"
    assert data["loop_traces"] == {"while": 5, "scan": 5, "cond": 0}
    assert "code passed to jax.lax's loops through several function objects:" in err
    assert "eager loops traced: while 5, scan 5" in err
    assert "--mode patch" in data["hint"]


def test_jit_mode_points_to_patch_mode_for_eager_loops(tmp_path):
    err, data = run(tmp_path, LOOPS, "jit")
    assert data["stablejit"]["traces"] == 0  # jax.jit is stable_jit, but no loop went there
    assert "hint: 3 codes reach jax.lax's loops" in err
    assert "--mode patch routes jax.lax's loops through stablejit" in err


def test_loops_under_a_trace_or_transformation_are_not_eager_culprits(tmp_path):
    err, data = run(tmp_path, TRACED_LOOPS, "off")
    assert data["loop_calls"] == 0
    assert data["redefined_loops"] == []
    assert data["hint"] is None
    assert "jax.lax's loops" not in err


def test_patch_mode_gives_each_functions_misses(tmp_path):
    err, data = run(tmp_path, LOOPS, "patch")
    assert data["hint"] is None
    assert data["stablejit"]["misses"] == 2
    rows = {r["function"]: r for r in data["functions"]}
    loop = rows[
        "stable_jit(while_loop(count_to.<locals>.cond, count_to.<locals>.body)) at prog.py:5"
    ]
    assert (loop["hits"], loop["misses"], loop["traces"], loop["explained"]) == (4, 1, 1, 0)
    assert sum(r["misses"] for r in data["functions"]) == data["stablejit"]["misses"]
    assert "stablejit per function" in err


def test_a_baked_array_shows_as_a_fallback_without_printing_the_log_line(tmp_path):
    err, data = run(tmp_path, BAKED, "jit")
    [fallback] = data["fallbacks"]
    assert fallback["reason"] == (
        "baked in, keyed by contents: needs global 'flag' as a concrete value"
    )
    assert fallback["traces"] == 2  # the failed trace, and the one with the array baked in
    assert "needs global 'flag' as a concrete value: keyed" not in err  # INFO: not shown
