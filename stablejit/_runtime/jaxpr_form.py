"""A jaxpr in a canonical form, for verify mode to compare two traces of one call.

Two traces of the same program are the same jaxpr up to what a trace makes
afresh: the variables (new objects, named by the printer in its own order),
the constants' objects (equal bytes in new arrays), the helper functions some
primitives carry as parameters (``custom_jvp``'s rule, ``custom_vjp``'s
thunks: new closures, printed with their addresses). :func:`form` writes one
line per equation, variables numbered in order of appearance (typed where they
first appear, their definition), constants and array literals as a digest of
their bytes, addresses left out, and nested jaxprs (``jit``, ``scan``,
``cond``'s branches) indented under their equation, so that
:func:`first_difference` can name the first line that differs. Run on sampled
hits only, never on the hot path.
"""

from __future__ import annotations

import hashlib
import re

import jax
import numpy as np
from jax._src import core as _internal
from jax.extend import core

# (Where each lives differs between JAX versions: jax.extend.core is the public home, which
# gained DropVar only after 0.6.)
_DROP_VAR = getattr(core, "DropVar", None) or _internal.DropVar

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+|0x[0-9a-fA-F]+")


def form(closed) -> list[str]:
    """The canonical lines of ``closed`` (a ``ClosedJaxpr``)."""
    writer = _Writer()
    writer.jaxpr(closed.jaxpr, closed.consts, 0)
    return writer.lines


def first_difference(was: list[str], now: list[str]) -> tuple[int, str, str] | None:
    """``(line number, was, now)`` of the first line that differs (a missing
    line reads ``"(none)"``), or None if the forms are the same."""
    for i, (a, b) in enumerate(zip(was, now, strict=False)):
        if a != b:
            return i, a, b
    if len(was) == len(now):
        return None
    i = min(len(was), len(now))
    return i, (was[i] if i < len(was) else "(none)"), (now[i] if i < len(now) else "(none)")


def digest(x) -> str:
    """A constant as its shape, dtype and a digest of its bytes."""
    try:
        if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
            x = jax.random.key_data(x)  # (a typed key has no bytes of its own)
        a = np.asarray(x)
    except Exception:  # noqa: BLE001 - a tracer (a trace under another): its type only
        return f"<{_ADDRESS.sub('', repr(getattr(x, 'aval', type(x).__name__)))}>"
    h = hashlib.blake2b(a.tobytes(), digest_size=8)
    return f"{a.dtype}{list(a.shape)}#{h.hexdigest()}"


class _Writer:
    def __init__(self):
        self.lines: list[str] = []
        self.names: dict = {}  # Var → its number, in order of appearance

    def atom(self, a) -> str:
        if isinstance(a, core.Literal):
            return f"{self.value(a.val)}:{a.aval.str_short()}"
        if isinstance(a, _DROP_VAR):
            return "_"
        n = self.names.get(a)
        if n is not None:
            return f"v{n}"
        # A variable's type is written where it first appears, its definition: a use cannot
        # differ from it, and writing types took over half of the form's time.
        n = self.names[a] = len(self.names)
        return f"v{n}:{a.aval.str_short()}"

    def atoms(self, atoms) -> str:
        return " ".join(self.atom(a) for a in atoms)

    def value(self, v) -> str:
        """A literal's or parameter's value; arrays by digest, scalars by value."""
        if isinstance(v, (np.ndarray, np.generic, jax.Array)):  # (JAX's literals are ndarrays)
            if np.ndim(v) == 0 and not jax.dtypes.issubdtype(v.dtype, jax.dtypes.prng_key):
                return repr(np.asarray(v).item())
            return digest(v)
        if isinstance(v, (tuple, list)):
            return "(" + ", ".join(self.value(x) for x in v) + ")"
        return " ".join(_ADDRESS.sub("", repr(v)).split())  # (a WrappedFun's repr has lines)

    def jaxpr(self, jaxpr, consts, depth: int) -> None:
        pad = "  " * depth
        line = f"{pad}lambda {self.atoms(jaxpr.constvars)} ; {self.atoms(jaxpr.invars)}"
        if consts:
            line += " consts " + " ".join(digest(c) for c in consts)
        self.lines.append(line)
        for eqn in jaxpr.eqns:
            nested: list = []
            params = ", ".join(
                f"{k}={self.param(v, nested)}" for k, v in sorted(eqn.params.items())
            )
            outs, ins = self.atoms(eqn.outvars), self.atoms(eqn.invars)
            self.lines.append(f"{pad}  {outs} = {eqn.primitive.name}[{params}] {ins}")
            for sub, sub_consts in nested:
                self.jaxpr(sub, sub_consts, depth + 2)
        self.lines.append(f"{pad}  in {self.atoms(jaxpr.outvars)}")

    def param(self, v, nested: list) -> str:
        """A parameter's value; a nested jaxpr by its place among ``nested``,
        written after the equation."""
        if isinstance(v, core.ClosedJaxpr):
            nested.append((v.jaxpr, v.consts))
            return f"{{jaxpr {len(nested)}}}"
        if isinstance(v, core.Jaxpr):
            nested.append((v, ()))
            return f"{{jaxpr {len(nested)}}}"
        if isinstance(v, (tuple, list)):
            return "(" + ", ".join(self.param(x, nested) for x in v) + ")"
        return self.value(v)
