"""A record's checks in their three forms — interpreted, generated Python, C — agree.

Each kind of guard holds its reference check, its generated lines and its C spec side by side
(stablejit's ``_fingerprint/guards.py``); these tests give one record the same functions through
every form and require the same answer (see ``_agreement.py``, which conftest also runs on every
record the suite builds). Each form made wrong on purpose must be caught.
"""

from typing import NamedTuple

import _agreement
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import count_trace

import stablejit
from stablejit import _native as native
from stablejit import stable_jit
from stablejit._fingerprint import container_guards, guards, pure_nodes
from stablejit._fingerprint.code import code_info
from stablejit._fingerprint.pytree_guards import PytreeGuard
from stablejit._fingerprint.records import RecordCheckError


class Point(NamedTuple):
    x: object
    y: object


class Config:
    def __init__(self, scale, name):
        self.scale, self.name = scale, name


class Node:
    """A registered pytree node: an array and a scale as metadata."""

    def __init__(self, w, scale):
        self.w, self.scale = w, scale


jax.tree_util.register_pytree_node(
    Node, lambda n: ((n.w,), n.scale), lambda scale, ch: Node(ch[0], scale)
)


class Fielded:
    """A node whose declared flatten reads only its ``__dict__`` (as an nnx
    Module's does): its arrays as children, its names and the rest as metadata."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def _fielded_flatten(n):
    names = sorted(vars(n))
    arrays = [k for k in names if hasattr(vars(n)[k], "shape")]
    rest = tuple(k for k in names if k not in arrays)
    return [vars(n)[k] for k in arrays], (tuple(arrays), rest, tuple(vars(n)[k] for k in rest))


class Slotted:
    """A node whose declared flatten reads a slot and, item by item, a
    slot's dict (as an nnx Variable's does)."""

    __slots__ = ("value", "meta")

    def __init__(self, value, **meta):
        self.value, self.meta = value, meta


def _fielded_unflatten(aux, children):
    arrays, rest, values = aux
    return Fielded(
        **dict(zip(arrays, children, strict=True)), **dict(zip(rest, values, strict=True))
    )


jax.tree_util.register_pytree_node(Fielded, _fielded_flatten, _fielded_unflatten)
jax.tree_util.register_pytree_node(
    Slotted,
    lambda s: ((s.value,), tuple(sorted(s.meta.items()))),
    lambda meta, ch: Slotted(ch[0], **dict(meta)),
)
pure_nodes.PURE[_fielded_flatten] = (pure_nodes.DICT,)
pure_nodes.PURE[jax._src.tree_util._registry[Slotted].to_iter] = (
    pure_nodes.Slot("value"),
    pure_nodes.Slot("meta", items=True),
)


def _helper(x):
    return x + 1


OFFSET = 1.0


class Scaled:
    """A user class whose contents a trace reads: a class attribute, a
    container, a property reading a global, a staticmethod."""

    factor = 2.0
    table = [1.0]

    @property
    def offset(self):
        return OFFSET

    @staticmethod
    def twice(x):
        return x * 2

    def __call__(self, x):
        return self.twice(x) * self.factor + self.offset + sum(self.table)


def _closures():
    """Functions whose children are of every kind of guard, each with a way to call it."""
    w = jnp.arange(3.0)
    shared = [1.0, 2.0]

    def inner(x):
        return x * 2.0

    def atoms(a=1, *, b=0.5):
        def f(x):
            count_trace()
            return x * a + b + (1 if s == "s" else 0) + (0 if n is None else 1) + abs(c) + z

        s, n, c, z = "s", None, 1 + 2j, 0.0
        return f

    def containers(x0):
        def f(x):
            count_trace()
            return (
                x * p.x
                + params["w"]
                + items[0]
                + len(cfg.name) * cfg.scale
                + sum(o.scale for o in objects)
                + node.w * node.scale
            )

        p = Point(2.0, "y")
        params = {"w": w, "b": w + 1}
        items = [x0, "tag", w]
        cfg = Config(3.0, "cfg")
        objects = [Config(float(i), "o") for i in range(10)]
        node = Node(w, 2.0)
        return f

    def functions():
        def f(x):
            count_trace()
            return first(x) + second(x) + _helper(x) + shared[0] + again[1]

        first = second = inner
        again = shared
        return f

    def constant():
        table = np.arange(3.0)

        def f(x):
            count_trace()
            return x * table

        return f

    def classes():
        def f(x):
            count_trace()
            return model(x) + cls.factor

        model, cls = Scaled(), Scaled
        return f

    def nodes():
        def f(x):
            count_trace()
            return x * model.w * model.inner.value * model.scale + len(model.tags) + len(again)

        inner = Slotted(w, trainable=True, names=("a", None))
        tags = ["t"]
        again = tags  # met in the node, then again: a back reference
        model = Fielded(w=w, inner=inner, scale=2.0, tags=tags, cfg=Config(1.0, "c"))
        return f

    return [atoms(), containers(1.0), functions(), constant(), classes(), nodes()]


def _built(f):
    stable_jit(f)(jnp.ones(3))
    stable_jit(f)(jnp.ones(3))
    record = code_info(f.__code__).fast.front
    assert record is not None, f"{f.__qualname__} got no record"
    return record


def test_every_form_agrees_on_closures_over_every_kind_of_guard():
    seen_kinds, hits, misses = set(), 0, 0
    for f in _closures():
        record = _built(f)
        seen_kinds.update(_kinds(record))
        made = _agreement.forms(record, f.__code__)
        for seed in range(40):
            g = _agreement.changed(f, __import__("random").Random(seed))
            said = _agreement.agree(record, f.__code__, g, made)
            if said["interpreted"] is None:
                misses += 1
            else:
                hits += 1
    # The changes reach both answers, and every kind of guard took part.
    assert hits > 20 and misses > 20
    assert seen_kinds >= set(guards.GUARD_TYPES) - {guards.LiftedGuard}


def _kinds(record):
    out = set()

    def visit(g):
        if type(g) in guards.GUARD_TYPES:
            out.add(type(g))
            for child in (*getattr(g, "items", ()), *getattr(g, "guards", ())):
                visit(child)
            if type(g) is container_guards.ObjectGuard:
                visit(g.state)
            if type(g) is PytreeGuard:
                visit(g.aux)
            if type(g) is pure_nodes.FieldsGuard:
                for _, child in g.plan:
                    visit(child)
            if type(g) is guards.FunctionGuard:
                out.update(_kinds(g.record))
            state = getattr(g, "state", None) or getattr(g, "cls_state", None)
            for _, child in getattr(state, "deep", None) or ():
                visit(child)

    for _, g in record.globals:
        visit(g)
    for g in record.cells:
        visit(g)
    return out


def test_every_record_the_suite_builds_is_given_to_every_form():
    runs = _agreement.RUNS[0]
    _built(_over([1.0, {"a": 2.0}]))
    assert _agreement.RUNS[0] > runs  # conftest's hook ran on it


def test_every_form_agrees_on_a_lifted_float():
    def make(lr):
        def f(x):
            return x * lr

        return f

    f = make(0.5)
    for _ in range(2):
        stable_jit(f, lift_scalars=True)(jnp.ones(2))
    record = code_info(f.__code__).fast.front
    assert type(record.cells[0]) is guards.LiftedGuard
    for lr, hit in [(0.25, True), (-0.0, True), (1, False), ("a", False)]:
        said = _agreement.agree(record, f.__code__, make(lr))
        assert (said["interpreted"] is not None) is hit


def _over(value):
    def f(x):
        return x * len(value)

    return f


def _record_over(value):
    f = _over(value)
    return f, _built(f)


def test_an_interpreted_check_made_wrong_is_caught(monkeypatch):
    f, record = _record_over([1.0, 2.0])
    monkeypatch.setattr(
        container_guards.ListGuard,
        "fits",
        lambda self, v, leaves, sinks, seen: type(v) is list,  # (no length, no items)
    )
    with pytest.raises(_agreement.Disagreement, match="interpreted"):
        _agreement.agree(record, f.__code__, _over([1.0, 2.0, 3.0]))


def test_generated_lines_made_wrong_are_caught(monkeypatch):
    f, record = _record_over({"a": 1.0, "b": 2.0})

    def emit(self, w, i, v):  # the keys left unchecked
        w.fail_if(i, f"type({v}) is not dict or len({v}) != {len(self.keys)}")
        w.fresh(i, v, container=True)

    monkeypatch.setattr(container_guards.DictGuard, "emit", emit)
    with pytest.raises(_agreement.Disagreement, match="compiled match|generated call"):
        _agreement.agree(record, f.__code__, _over({"a": 1.0, "c": 2.0}))


@pytest.mark.skipif(native.NATIVE is None, reason="the C accelerator is not built")
def test_a_native_spec_made_wrong_is_caught(monkeypatch):
    f, record = _record_over(Point(1.0, 2.0))
    monkeypatch.setattr(
        container_guards.TupleGuard,
        "spec",
        lambda self, s: (self.mark, tuple, s.items(self.items), None),  # a plain tuple's type
    )
    with pytest.raises(_agreement.Disagreement, match="native"):
        _agreement.agree(record, f.__code__, _over(Point(1.0, 2.0)))


@pytest.mark.skipif(native.NATIVE is None, reason="the C accelerator is not built")
@pytest.mark.parametrize("wrong", ["a name missing", "a name changed", "a mark twice"])
def test_the_accelerator_takes_kinds_only_by_their_names(wrong):
    from stablejit._runtime import hot

    f, record = _record_over([1.0])
    kinds = list(guards.native_kinds())
    if wrong == "a name missing":
        kinds.pop()
    elif wrong == "a name changed":
        kinds[0] = ("not a kind", kinds[0][1])
    else:
        kinds[1] = (kinds[1][0], kinds[0][1])
    with pytest.raises(ValueError, match="RecordCall"):
        native.NATIVE.RecordCall(
            **{**_record_call_args(hot, record, f), "kinds": tuple(kinds)},
        )
    assert type(native.NATIVE.RecordCall(**_record_call_args(hot, record, f))).__name__ == (
        "RecordCall"
    )


def _record_call_args(hot, record, f):
    from stablejit._fingerprint import sinks
    from stablejit._fingerprint.kind import LEAF_TYPES, MISSING, TABLE
    from stablejit._fingerprint.rebuild import RebuildMismatch
    from stablejit._runtime.cache import Entry

    return dict(
        top=guards.FunctionGuard.record_spec(f.__code__, record, hot._Spec(sinks.SINKS)),
        sinks=record.sinks,
        any_array=guards.ANY_ARRAY,
        leaf_types=LEAF_TYPES,
        missing=MISSING,
        kinds=guards.native_kinds(),
        table=TABLE,
        entries={},
        general=print,
        plainly=print,
        mismatch=RebuildMismatch,
        entry_type=Entry,
    )


def test_a_record_that_disagrees_with_its_walk_is_refused_at_once(monkeypatch):
    from stablejit._fingerprint.records import Record

    real = Record.interpret
    monkeypatch.setattr(
        Record, "interpret", lambda self, fn, leaves, *a: real(self, fn, leaves, *a) and None
    )
    with pytest.raises(RecordCheckError, match="does not match it"):
        stable_jit(_over((1.0, 2.0)))(jnp.ones(2))


def test_a_call_function_that_disagrees_with_its_record_is_refused_when_installed(
    monkeypatch,
):
    from stablejit._fingerprint import codegen

    monkeypatch.setattr(native, "NATIVE", None)  # the generated call function
    real = codegen._write

    def write(record, starts):  # a call function whose checks take no arrays
        w = real(record, starts)
        if starts:
            w.lines.append("    leaves = []")
        return w

    monkeypatch.setattr(codegen, "_write", write)
    # (conftest's differential would catch it at the record's build: here the install must.)
    monkeypatch.setattr(_agreement, "differential", lambda *a, **k: None)
    values = {"w": jnp.ones(2)}
    with pytest.raises(RecordCheckError, match="call function"):
        for _ in range(8):
            stable_jit(_over(values))(jnp.ones(2))


def test_record_checks_are_off_unless_asked(monkeypatch):
    monkeypatch.delenv("STABLEJIT_CHECK_RECORDS", raising=False)
    assert stablejit.Config().check_records is False
    monkeypatch.setenv("STABLEJIT_CHECK_RECORDS", "1")
    assert stablejit.Config().check_records is True
