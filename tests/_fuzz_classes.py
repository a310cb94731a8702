"""The fuzzer's class family: a closure that reaches user classes, whose class-level state changes.

The traced function reaches three classes (``M`` < ``Base`` < ``Root``) through a bound
method of an instance, ``self``, ``cls`` and a global, and a fourth (``Solo``) only as a
class, through a tuple and a global: methods that call methods on a base, a property and
a static method that read globals, class methods that read class attributes, class-level
lists, dicts, NumPy and JAX arrays.
Between calls the program changes what lives on the classes — rebinds a class attribute on
the class that holds it or on a subclass (shadowing it), replaces a method on any of the
three, rebinds a global a property or a method reads, mutates a class-level list, dict or
NumPy array in place, adds an attribute to a base that shadows nothing or that shadows the
instance's own (a property), deletes what it added — as well as the instance's own state,
the closure's cell, and the closure itself. A key that names a class only by identity
misses every class-level change; the eager result shows it. Half the programs run without
a ``__name__`` in their globals, as ``exec(source, {})`` does, so that their classes name
the builtins module as theirs (taken for a library's once, and keyed by identity).
"""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
from _fuzz_values import P, arrays, config, mutate, set_cell, values
from hypothesis import strategies as st

SOURCE = """
class Root:
    s = 2.0
    k = 1.5
    table = [1.0, 2.0]
    opts = {"x": 0.5}
    small = np.arange(3, dtype=np.float32)  # a NumPy constant: keyed by its contents
    big = np.arange(2048, dtype=np.float32)  # a class's arrays are baked, whatever their size
    jarr = jnp.ones(3)

    def act(self, x):
        return x + P(self.s) * P(G1)

    @property
    def gain(self):
        return P(GP) + 1.0

    @classmethod
    def cm(cls, x):
        return x * P(cls.k)

    @staticmethod
    def sm(x):
        return x + P(GS)


class Base(Root):
    def mix(self, x):
        acc = self.act(x) * self.gain + P(self.table) + 2.0 * P(self.opts)
        return acc + 3.0 * P(self.small) + 5.0 * P(self.big) + 7.0 * P(self.jarr)


class M(Base):
    def __init__(self, v):
        self.v = v

    def step(self, x):
        acc = self.mix(x) + self.cm(x) + M.sm(x) + 11.0 * P(self.v)
        return acc + 13.0 * P(getattr(self, "extra", 0.0))


class Solo:  # reached as a class only, never through an instance
    k = 0.5
    table = [3.0]

    @classmethod
    def cm(cls, x):
        acc = x * P(cls.k) + P(cls.table) + 2.0 * P(getattr(cls, "extra", 0.0))
        return acc + 3.0 * P(getattr(cls, "s", 1.0))

    @staticmethod
    def sm(x):
        return x * P(GS)


def make(c0, m):
    bound = m.step
    kinds = (M, Solo)

    def f(x):
        if isinstance(x, jax.core.Tracer):
            T.append(1)
        acc = bound(x) + kinds[1].cm(x) * P(c0) + 0.5 * Solo.sm(x)
        return acc + 0.25 * Base.cm(x) + 0.125 * m.gain

    return f
"""

CLASSES = ("Root", "Base", "M", "Solo")
HIERARCHY = CLASSES[:3]  # where a replaced ``act`` or a shadowing ``v`` is read
GLOBALS = ("G1", "GP", "GS")
# Class attributes the program rebinds, adds or deletes: those Root defines, ``extra``
# (read through getattr with a default: added anywhere, it shadows nothing) and
# ``unused`` (read by nothing).
ATTRIBUTES = ("s", "k", "table", "opts", "small", "big", "jarr", "extra", "unused")
# What replaces ``act``, compiled anew each time (new function objects, equal code).
METHODS = (
    "lambda self, x: x + 10.0",
    "lambda self, x: x * 2.0 + P(self.s)",
    "lambda self, x: x - P(G1) * P(self.k)",
)
# A property put on a base under the name of the instance's own ``v``: a data
# descriptor on the class wins over the instance's dict.
SHADOWS = ("property(lambda self: 5.0)", "property(lambda self: P(GP) * 2.0)")
numbers = st.one_of(st.sampled_from([0.5, 2.0, -0.0, 3, True]), arrays())


class ClassProgram:
    """One program of the class family, and the function under test."""

    ACTIONS = (
        "call", "instance", "global", "cell", "class attribute", "method", "shadow",
        "delete", "in place", "redefine", "new instance",
    )  # fmt: skip
    INPUTS = [(2,), (2, 3)]
    lift = False
    # A key that tells classes apart by their contents may well tell apart states that
    # configuration() holds equal: an attribute's order in a class's dict, a subclass's
    # copy equal to its base's. So: results always, and at most a trace per configuration.
    exact = False

    def __init__(self, data) -> None:
        self.ns: dict = {"P": P, "jax": jax, "jnp": jnp, "np": np, "T": []}
        self.held: list = []  # the JAX arrays configuration() counted by identity
        if data.draw(st.booleans()):
            self.ns["__name__"] = "fuzz_classes"
        # (else, as exec(source, {}) does, the classes name the builtins module as theirs)
        for name in GLOBALS:
            self.ns[name] = data.draw(numbers)
        exec(compile(SOURCE, "<fuzz class program>", "exec"), self.ns)
        self.own = {c: set(vars(self.ns[c])) for c in ("Root", "Solo")}
        self.c0 = data.draw(numbers)
        self.m = self.ns["M"](data.draw(values))
        self.f = self.ns["make"](self.c0, self.m)

    def change(self, action: str, data) -> str:
        """Makes the change ``action`` names, drawing what it needs; says what it changed."""
        pool = HIERARCHY if action in ("method", "shadow") else CLASSES
        cls = self.ns[data.draw(st.sampled_from(pool))]
        if action == "instance":
            vars(self.m)["v"] = data.draw(values)  # past a shadowing property, if any
        elif action == "global":
            name = data.draw(st.sampled_from(GLOBALS))
            self.ns[name] = data.draw(numbers)
            return f"rebind global {name}"
        elif action == "cell":
            self.c0 = data.draw(numbers)
            set_cell(self.f, "c0", self.c0)
        elif action == "class attribute":
            name = data.draw(st.sampled_from(ATTRIBUTES))
            setattr(cls, name, data.draw(values))
            return f"{cls.__name__}.{name} = ..."
        elif action == "method":
            cls.act = eval(data.draw(st.sampled_from(METHODS)), self.ns)
            return f"replace {cls.__name__}.act"
        elif action == "shadow":
            cls.v = eval(data.draw(st.sampled_from(SHADOWS)), self.ns)
            return f"{cls.__name__}.v = property"
        elif action == "delete":
            return self._delete(cls, data)
        elif action == "in place":
            name = data.draw(st.sampled_from(ATTRIBUTES))
            mutate(getattr(cls, name, None), data)
            return f"mutate {cls.__name__}.{name} in place"
        elif action == "redefine":
            self.f = self.ns["make"](self.c0, self.m)
        elif action == "new instance":  # an equal one (not through __init__: v may be shadowed)
            self.m = copy.copy(self.m)
            self.f = self.ns["make"](self.c0, self.m)
        return action

    def _delete(self, cls, data) -> str:
        """Deletes an attribute the program added: none of what Root and Solo define,
        which their methods need, but any a subclass shadows it with."""
        own = self.own.get(cls.__name__, ())
        names = [n for n in (*ATTRIBUTES, "act", "v") if n in vars(cls) and n not in own]
        if not names:
            return "delete nothing"
        name = data.draw(st.sampled_from(names))
        delattr(cls, name)
        return f"del {cls.__name__}.{name}"

    def configuration(self, x) -> tuple:
        """What a key that reads classes by their contents would tell apart."""
        classes = tuple(
            tuple(
                (n, self._baked(v)) for n, v in vars(self.ns[c]).items() if not n.startswith("__")
            )
            for c in CLASSES
        )
        # The globals are read by the classes' methods alone: part of the classes' keys.
        here = (config(vars(self.m)["v"]), config(self.c0))
        return (config(x), classes, *here, *(self._baked(self.ns[n]) for n in GLOBALS))

    def _baked(self, v):
        """``_config`` of what a class's key reaches: baked into the trace, never lifted (a
        class is keyed apart from any call's inputs). So a JAX array counts by which array
        it is (held here, so that no later array takes its id), as the key compares it."""
        if isinstance(v, jax.Array):
            self.held.append(v)
            return ("baked", id(v))
        return _config(v)


def _config(v):
    """``config``, and functions by their code (what replaced methods differ in). A class's
    NumPy arrays are baked into the trace whatever their size, so they count by their
    contents."""
    if type(v) is np.ndarray:
        return ("constant", v.shape, str(v.dtype), v.tobytes())
    if isinstance(v, (classmethod, staticmethod)):
        return (type(v), v.__func__.__code__)
    if isinstance(v, property):
        return (property, v.fget.__code__)
    if callable(v) and hasattr(v, "__code__"):
        return ("function", v.__code__)
    return config(v)
