"""The census: ``python -m stablejit run`` and the opt-in pytest plugin ``stablejit.pytest``."""

import json
import subprocess
import sys
import textwrap

import pytest
from _helpers import child_env

from stablejit import _native as native

pytest_plugins = ["pytester"]


# Five calls of a function that jits a closure it defines: a new function object each time.
REDEFINED = """
import jax, jax.numpy as jnp

def outer(a):
    def inner(x):
        return x * 2
    return jax.jit(inner)(a)

x = jnp.ones(3)
for _ in range(5):
    outer(x)
print("script done")
"""

# The closure reads a Python float that changes: stablejit retraces, and says why.
CHANGING = """
import jax, jax.numpy as jnp

def step(x, lr):
    def update(p):
        return p - lr * p
    return jax.jit(update)(x)

x = jnp.ones(3)
for i in range(4):
    x = step(x, 0.1 * (i + 1))
"""


def run(tmp_path, source, *options, args=()):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source))
    report = tmp_path / "census.json"
    proc = subprocess.run(
        [sys.executable, "-m", "stablejit", "run", *options, "--report", str(report), str(script)]
        + list(args),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=child_env(),
        timeout=300,
    )
    data = json.loads(report.read_text()) if report.exists() else None
    return proc, data


def redefined(data, code):
    return next(r for r in data["redefined"] if r["code"] == code)


def test_off_counts_every_jit_object_and_trace(tmp_path):
    proc, data = run(tmp_path, REDEFINED, "--mode", "off")
    assert proc.returncode == 0, proc.stderr
    assert "script done" in proc.stdout
    assert "stablejit census (mode off)" in proc.stderr
    assert data["jit_objects"] == 5
    assert data["traces_of_jitted"] == 5
    assert data["stablejit"] is None
    row = redefined(data, "outer.<locals>.inner")
    assert (row["function_objects"], row["jit_objects"], row["traces"]) == (5, 5, 5)
    assert row["where"] == "prog.py:5"
    assert "outer.<locals>.inner  prog.py:5" in proc.stderr


@pytest.mark.parametrize("mode", ["jit", "patch"])
def test_stablejit_modes_trace_once(tmp_path, mode):
    proc, data = run(tmp_path, REDEFINED, "--mode", mode)
    assert proc.returncode == 0, proc.stderr
    assert data["jit_objects"] == 5
    assert data["traces_of_jitted"] == 1
    assert redefined(data, "outer.<locals>.inner")["traces"] == 1
    sj = data["stablejit"]
    assert (sj["hits"], sj["misses"], sj["traces"], sj["compiles"]) == (4, 1, 1, 1)
    assert "stablejit hits / misses      4 / 1" in proc.stderr
    # The child runs as this process does: with the accelerator, or pure Python if set so.
    assert sj["accelerator"] is (native.NATIVE is not None)


# Names bound to the census's own jax.jit and while_loop (imported after it is installed): the
# census counts every event, which must not change the key of a function reading them.
READS_THE_WRAPPERS = """
import jax, jax.numpy as jnp
import stablejit
from jax import jit
from jax.lax import while_loop

@jit
def count_up(x):
    return while_loop(lambda c: c < 10, lambda c: c + 1, x)

for i in range(4):
    count_up(jnp.int32(i))
    jit(lambda y: y * 2)(float(i))  # other functions trace: the census's tallies change
print("traces of count_up:", stablejit.num_traces(count_up))
"""


@pytest.mark.parametrize("mode", ["jit", "patch"])
def test_a_function_reading_the_census_wrappers_is_not_retraced_by_its_counting(tmp_path, mode):
    proc, _ = run(tmp_path, READS_THE_WRAPPERS, "--mode", mode)
    assert proc.returncode == 0, proc.stderr
    assert "traces of count_up: 1" in proc.stdout, proc.stdout


def test_retrace_reason_names_the_variable(tmp_path):
    proc, data = run(tmp_path, CHANGING, "--mode", "jit")
    assert proc.returncode == 0, proc.stderr
    [reason] = data["retrace_reasons"]
    assert reason["reason"] == "closure variable 'lr' changed"
    assert reason["count"] == 3
    assert reason["function"] == "stable_jit(step.<locals>.update) at prog.py:5"
    assert "closure variable 'lr' changed" in proc.stderr
    # Collected for the census, not printed by the logger as well.
    assert proc.stderr.count("retraced") == 1  # the census's own heading


def test_exit_status_and_arguments_are_the_programs(tmp_path):
    source = "import sys\nprint(sys.argv)\nsys.exit(3)\n"
    proc, data = run(tmp_path, source, args=["--flag", "x"])
    assert proc.returncode == 3
    assert "'--flag', 'x']" in proc.stdout
    assert "stablejit census (mode off)" in proc.stderr
    assert data["jit_objects"] == 0


def test_an_exception_still_prints_the_census(tmp_path):
    proc, _ = run(tmp_path, "raise ValueError('boom')\n")
    assert proc.returncode == 1
    assert "ValueError: boom" in proc.stderr
    assert proc.stderr.index("ValueError: boom") < proc.stderr.index("stablejit census")


def test_pytest_plugin_installs_the_mode_before_test_modules(pytester):
    pytester.makeconftest(
        """
        import inspect, jax, stablejit

        CONFTEST_SAW = inspect.unwrap(jax.jit)
        """
    )
    pytester.makepyfile(
        test_it="""
        import inspect, jax, jax.numpy as jnp, stablejit
        import conftest

        # At import time: the census wraps jax.jit, which stands for stable_jit.
        assert inspect.unwrap(jax.jit) is stablejit.stable_jit
        assert conftest.CONFTEST_SAW is stablejit.stable_jit

        def outer(a):
            return jax.jit(lambda x: x + 1)(a)

        def test_calls():
            for _ in range(3):
                outer(jnp.ones(2))
        """
    )
    report = pytester.path / "census.json"
    result = pytester.runpytest_subprocess(
        "-p", "stablejit.pytest", "--stablejit=jit", f"--stablejit-report={report}"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*stablejit census*", "stablejit census (mode jit)", "*jax.jit objects created*3"]
    )
    data = json.loads(report.read_text())
    assert data["mode"] == "jit"
    assert data["stablejit"]["traces"] == 1


def test_pytest_plugin_is_opt_in(pytester):
    pytester.makepyfile(
        test_plain="""
        from stablejit import _census

        def test_x():
            assert _census.installed() is None
        """
    )
    result = pytester.runpytest_subprocess("-p", "stablejit.pytest")
    result.assert_outcomes(passed=1)
    assert "stablejit census" not in result.stdout.str()
