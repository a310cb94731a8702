"""A retrace on argument types names the argument: its position and parameter name, a closure
variable by name, and JAX's weak types marked (``~``), which look like equal types otherwise;
and the quick start's loop example traces once, as it says."""

import gc
import re
import weakref
from pathlib import Path

import jax.numpy as jnp

import stablejit
from stablejit import stable_jit
from stablejit._diagnostics import explain as explain_module

QUICKSTART = Path(__file__).resolve().parent.parent / "docs" / "quickstart.md"


def test_a_weakly_typed_argument_is_named_and_marked(explained):
    def scaled(n, x, y):
        return x * n + y

    f = stable_jit(scaled, static_argnums=0)
    f(2, jnp.ones(2), jnp.ones(2))
    f(2, jnp.ones(2), jnp.full(2, 3.0))
    (message,) = explained()
    assert message.endswith(
        "retraced: argument 2 ('y'): float32[2] → ~float32[2] "
        "(~: a weak type, as of an array made from a Python scalar)"
    )  # one reason (the census counts reasons split on "; "); x kept its type


def test_a_keyword_argument_is_named(explained):
    f = stable_jit(lambda x, *, scale: x * scale)
    f(jnp.ones(2), scale=jnp.ones(2))
    f(jnp.ones(2), scale=jnp.full(2, 2.0))
    assert "keyword argument 'scale': float32[2] → ~float32[2]" in explained()[-1]


def test_a_redefined_closure_names_its_argument_after_the_first_is_gone(explained):
    def make():
        def inner(x):
            return x * 2

        return inner

    first = make()
    stable_jit(first)(jnp.ones(2))
    gone = weakref.ref(first)
    del first
    gc.collect()
    assert gone() is None  # the entry's first callable is gone when the retrace is explained
    stable_jit(make())(jnp.ones(3))
    assert explained()[-1].endswith("argument 0 ('x'): float32[2] → float32[3]")


def test_a_closed_over_weakly_typed_array_is_named(explained):
    def count_to(n, x):
        def body(state):
            i, acc = state
            return i + 1, acc + x

        return stablejit.while_loop(lambda s: s[0] < n, body, (0, jnp.zeros_like(x)))

    count_to(5, jnp.ones(2))
    count_to(5, jnp.full(2, 3.0))
    message = explained()[-1]
    assert "closure variable 'x': float32[2] → ~float32[2]" in message
    assert "argument 0 ('init_val')" in message  # the loop's own parameter, by name


def _entry(signature):
    """A cache entry that traced once with ``signature``, over a closed-over array."""
    from stablejit._runtime.cache import Entry

    entry = Entry(("key",), "tag")
    entry.counts.signature = signature
    entry.counts.leaf_labels = ["closure variable 'w'"]
    return entry


def test_an_unchanged_signature_says_what_else_changed(explained):
    sig = (("float32[2]",), ("float32[3]",), {})
    explain_module.on_retrace(_entry(sig), "f", "", sig)
    assert explained()[-1].endswith(
        "the shapes, dtypes and weak types of every argument and lifted array are unchanged: "
        "their shardings (or another property jax.jit keys on) changed"
    )


def test_the_quickstart_loop_traces_once(capsys):
    blocks = re.findall(r"```python\n(.*?)```", QUICKSTART.read_text(), re.S)
    (code,) = [b for b in blocks if "count_to" in b]
    exec(compile(code, "quickstart.md", "exec"), {"__name__": "docs_quickstart"})
    assert capsys.readouterr().out == "tracing the loop\n"
