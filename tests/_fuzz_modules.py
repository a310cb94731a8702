"""The fuzzer's model family: closures over equinox and flax nnx modules, pytree nodes that change.

An equinox program closes over a list holding a ``Net`` (an ``eqx.Module`` with a list of
``Layer``s and a head: array fields, a static activation and a static scale) and over an
``eqx.nn.Linear``, and reads another ``Net`` as a global. An nnx program does the same with
a user ``nnx.Module`` (an ``nnx.Linear``, an ``nnx.Param``, a Python float, an ``nnx.List``
of layers) held in a dict, a closed-over ``nnx.Linear`` and a global module. Between calls
the program swaps array fields for new arrays of the same or another shape, changes static
fields, adds and removes layers, rebuilds every module from its fields, replaces the
closed-over layer and redefines the closure, each the way the library means it to be done
(``eqx.tree_at`` and ``dataclasses.replace`` on frozen equinox modules, assignment on
mutable nnx ones). Arrays are lifted and everything else is keyed, so the traces are one per
``structure``: what a module is once its arrays are reduced to shapes and dtypes.

The libraries come in as arguments (the tests import them with ``pytest.importorskip``), so
this module imports on a Python where neither is installed.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from _fuzz_values import config, set_cell
from hypothesis import strategies as st

EQX_SOURCE = """
class Layer(eqx.Module):
    w: jax.Array
    b: jax.Array
    act: Any = eqx.field(static=True)

    def __call__(self, x):
        return self.act(x @ self.w + self.b)


class Net(eqx.Module):
    layers: list
    head: Layer
    scale: float = eqx.field(static=True)

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x) * self.scale


def make(models, lin):
    def f(x):
        if isinstance(x, jax.core.Tracer):
            T.append(1)
        return models[0](x) + 2.0 * lin(x.reshape(-1, 3)[0]) + 3.0 * NET(x)

    return f
"""

NNX_SOURCE = """
class Block(nnx.Module):
    def __init__(self, lin, w, scale):
        self.lin = lin
        self.w = nnx.Param(w)
        self.scale = scale
        self.extra = nnx.List([])

    def __call__(self, x):
        y = self.lin(x) * self.w[...] + self.scale
        for layer in self.extra:
            y = jnp.tanh(layer(y))
        return y


def make(blocks, lin):
    def f(x):
        if isinstance(x, jax.core.Tracer):
            T.append(1)
        return blocks["a"](x) + 2.0 * lin(x) + 3.0 * BLOCK(x)

    return f
"""

# Static activations: library functions (keyed by identity) and lambdas made anew
# each time they are drawn (keyed by their code).
ACTIVATIONS = ("jnp.tanh", "jnp.sin", "jax.nn.relu", "lambda z: z * 0.5", "lambda z: z - 1.0")
SCALES = (0.5, 1.0, 2.0)
# A bias or a weight vector: the shape it has, or another one that broadcasts.
VECTORS = ((3,), (), (1,))


def array(data, shape, dtype=np.float32):
    """A drawn array of ``shape``: small integers, so every dtype holds them exactly."""
    start = data.draw(st.integers(-2, 2))
    n = int(np.prod(shape))
    return jnp.asarray((start + np.arange(n) % 3).reshape(shape) * 0.5, dtype)


class _ModuleProgram:
    """What both libraries' programs share: the calls, the closure, the count of traces."""

    ACTIONS = ("call", "swap", "static", "layers", "rebuild", "linear", "redefine")
    INPUTS = [(3,), (2, 3)]
    lift = False
    exact = True

    def __init__(self, source: str, **names) -> None:
        self.ns: dict = {"jax": jax, "jnp": jnp, "np": np, "Any": object, "T": [], **names}
        self.ns["__name__"] = "fuzz_modules"
        # (Not under this module's `from __future__ import annotations`: dataclass fields
        # would be strings, which equinox resolves in sys.modules.)
        exec(compile(source, "<fuzz model program>", "exec", dont_inherit=True), self.ns)

    def act(self, data):
        return eval(data.draw(st.sampled_from(ACTIVATIONS)), self.ns)

    def configuration(self, x) -> tuple:
        return (config(x), *(structure(v) for v in self.held()))


class EqxProgram(_ModuleProgram):
    """An equinox program (``eqx`` is the imported library)."""

    def __init__(self, eqx, data) -> None:
        super().__init__(EQX_SOURCE, eqx=eqx)
        self.eqx = eqx
        self.models = [self.net(data)]
        self.ns["NET"] = self.net(data)
        self.lin = self.linear(data)
        self.f = self.ns["make"](self.models, self.lin)

    def layer(self, data):
        b = array(data, data.draw(st.sampled_from(VECTORS)))
        return self.ns["Layer"](array(data, (3, 3)), b, self.act(data))

    def net(self, data):
        layers = [self.layer(data) for _ in range(data.draw(st.integers(0, 2)))]
        return self.ns["Net"](layers, self.layer(data), data.draw(st.sampled_from(SCALES)))

    def linear(self, data):
        return self.eqx.nn.Linear(3, 3, key=jax.random.key(data.draw(st.integers(0, 3))))

    def held(self):
        return (self.models[0], self.ns["NET"], self.lin)

    def change(self, action: str, data) -> str:
        """Makes the change ``action`` names, drawing what it needs; says what it changed."""
        where = data.draw(st.sampled_from(["models[0]", "NET"]))
        net = self.models[0] if where == "models[0]" else self.ns["NET"]
        i = data.draw(st.integers(-1, len(net.layers) - 1))  # -1: the head

        def at(n):
            return n.head if i < 0 else n.layers[i]

        if action == "swap":
            field = data.draw(st.sampled_from(["w", "b"]))
            old = getattr(at(net), field)
            shape = old.shape if field == "w" else data.draw(st.sampled_from(VECTORS))
            dtype = data.draw(st.sampled_from([np.float32, jnp.bfloat16]))
            net = self.eqx.tree_at(lambda n: getattr(at(n), field), net, array(data, shape, dtype))
            what = f"swap {where} layer {i} .{field} for {shape} {np.dtype(dtype)}"
        elif action == "static" and data.draw(st.booleans()):
            net = dataclasses.replace(net, scale=data.draw(st.sampled_from(SCALES)))
            what = f"{where}.scale = {net.scale}"
        elif action == "static":
            net = self.eqx.tree_at(at, net, dataclasses.replace(at(net), act=self.act(data)))
            what = f"{where} layer {i} .act = ..."
        elif action == "layers":
            add = len(net.layers) < 3 and data.draw(st.booleans())
            layers = [*net.layers, self.layer(data)] if add else net.layers[:-1]
            net = self.ns["Net"](layers, net.head, net.scale)
            what = f"{where} now has {len(layers)} layers"
        elif action == "rebuild":  # new module objects, equal fields, copied arrays
            self.models[0] = jax.tree_util.tree_map(jnp.array, self.models[0])
            self.ns["NET"] = jax.tree_util.tree_map(jnp.array, self.ns["NET"])
            return action
        elif action == "linear":
            self.lin = self.linear(data)
            set_cell(self.f, "lin", self.lin)
            return "new closed-over eqx.nn.Linear"
        else:
            self.f = self.ns["make"](self.models, self.lin)
            return action
        if where == "NET":
            self.ns["NET"] = net
        else:
            self.models[0] = net
        return what


class NnxProgram(_ModuleProgram):
    """A flax nnx program (``nnx`` is the imported ``flax.nnx``)."""

    def __init__(self, nnx, data) -> None:
        super().__init__(NNX_SOURCE, nnx=nnx)
        self.nnx = nnx
        self.blocks = {"a": self.block(data)}
        self.ns["BLOCK"] = self.block(data)
        self.lin = self.linear(data)
        self.f = self.ns["make"](self.blocks, self.lin)

    def linear(self, data):
        return self.nnx.Linear(3, 3, rngs=self.nnx.Rngs(data.draw(st.integers(0, 3))))

    def block(self, data):
        w = array(data, data.draw(st.sampled_from(VECTORS)))
        return self.ns["Block"](self.linear(data), w, data.draw(st.sampled_from(SCALES)))

    def held(self):
        return (self.blocks["a"], self.ns["BLOCK"], self.lin)

    def change(self, action: str, data) -> str:
        """Makes the change ``action`` names, drawing what it needs; says what it changed."""
        where = data.draw(st.sampled_from(['blocks["a"]', "BLOCK"]))
        block = self.ns["BLOCK"] if where == "BLOCK" else self.blocks["a"]
        if action == "swap" and data.draw(st.booleans()):  # a new Param, maybe a new shape
            block.w = self.nnx.Param(array(data, data.draw(st.sampled_from(VECTORS))))
            return f"{where}.w = Param of shape {block.w[...].shape}"
        if action == "swap":  # new values in place
            var = data.draw(st.sampled_from([block.lin.kernel, block.lin.bias, block.w]))
            var[...] = array(data, var.shape)
            return f"{where}: a Variable's value replaced in place"
        if action == "static":
            block.scale = data.draw(st.sampled_from(SCALES))
            return f"{where}.scale = {block.scale}"
        if action == "layers":
            if len(block.extra) < 2 and data.draw(st.booleans()):
                block.extra.append(self.linear(data))
            elif len(block.extra):
                block.extra.pop()
            return f"{where} now has {len(block.extra)} extra layers"
        if action == "rebuild":  # new module objects, equal fields, the same arrays
            self.blocks["a"] = self.rebuilt(self.blocks["a"])
            self.ns["BLOCK"] = self.rebuilt(self.ns["BLOCK"])
            return action
        if action == "linear":
            self.lin = self.linear(data)
            set_cell(self.f, "lin", self.lin)
            return "new closed-over nnx.Linear"
        self.f = self.ns["make"](self.blocks, self.lin)
        return action

    def rebuilt(self, block):
        lin = self.nnx.Linear(3, 3, rngs=self.nnx.Rngs(0))
        lin.kernel, lin.bias = (
            self.nnx.Param(block.lin.kernel[...]),
            self.nnx.Param(block.lin.bias[...]),
        )
        new = self.ns["Block"](lin, block.w[...], block.scale)
        new.extra.extend(block.extra)
        return new


def structure(v):
    """What a module is with its arrays reduced to shapes and dtypes: equinox modules
    by their fields, nnx modules by their attributes and Variables by their values, lists,
    lambdas by their code; library functions and other values as themselves."""
    if isinstance(v, (jax.Array, np.ndarray, float)):
        return config(v)
    if hasattr(v, "get_value"):  # an nnx Variable
        return (type(v), structure(v.get_value()))
    if hasattr(v, "_pytree__state") and hasattr(v, "append"):  # an nnx List
        return (type(v), tuple(structure(x) for x in v))
    if hasattr(v, "_pytree__state"):  # an nnx Module
        own = [(k, x) for k, x in vars(v).items() if not k.startswith("_pytree__")]
        return (type(v), tuple((k, structure(x)) for k, x in own))
    if dataclasses.is_dataclass(v):  # an equinox Module (nnx's are dataclasses with no fields)
        return (
            type(v),
            tuple((f.name, structure(getattr(v, f.name))) for f in dataclasses.fields(v)),
        )
    if isinstance(v, (list, tuple)):
        return tuple(structure(x) for x in v)
    if getattr(v, "__name__", None) == "<lambda>":
        return ("lambda", v.__code__)
    return v
