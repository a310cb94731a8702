"""Class-level state a trace reads is never stale: user classes are keyed by their contents.

A trace reaches a class through an instance, a bound method, a base, a property or the class
itself; changing what it holds (an attribute rebound, a method replaced, a global a method
reads rebound, a container mutated in place) must retrace. An unchanged class must not: a
closure over an instance, defined anew on every call, traces once. Each shortcut of the
re-check (CPython's version tag, the accelerator's deep checks) has a test that fails when
the shortcut is made wrong.
"""

import _agreement
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import count_trace

from stablejit import _native as native
from stablejit import stable_jit
from stablejit._fingerprint import class_guards, classes
from stablejit._fingerprint.code import code_info

X = jnp.arange(3.0)
OFFSET = 1.0


def _closure(obj):
    """A closure over ``obj``, defined and jitted anew on every call (the
    commonest way a model reaches stable_jit)."""

    def f(x):
        count_trace()
        return obj(x)

    return stable_jit(f)


def _calls(obj, n=3):
    for _ in range(n):
        np.testing.assert_allclose(_closure(obj)(X), obj(X))


def _make_scaled():
    class Scaled:
        s = 2.0

        def __call__(self, x):
            return x * self.s

    return Scaled


def _make_shifted():
    """A class whose property reads the global ``OFFSET``, which the tag cannot see."""

    class Shifted:
        @property
        def offset(self):
            return OFFSET

        def __call__(self, x):
            return x + self.offset

    return Shifted


def test_a_rebound_class_attribute_retraces(traced):
    Scaled = _make_scaled()
    m = Scaled()
    _calls(m)
    Scaled.s = 3.0
    _calls(m)
    Scaled.s = 3.0  # the same value again: the version tag changes, the contents do not
    _calls(m)
    assert traced() == 2


def test_a_method_replaced_on_the_class_or_a_base_retraces(traced):
    class Base:
        def act(self, x):
            return x + 1

    class Model(Base):
        def __call__(self, x):
            return self.act(x) * 2

    m = Model()
    _calls(m)
    Model.act = lambda self, x: x + 10
    _calls(m)
    del Model.act
    Base.act = lambda self, x: x - 5
    _calls(m)
    assert traced() == 3


def test_super_reads_the_base_as_it_is_now(traced):
    class Base:
        def scale(self):
            return 2.0

    class Child(Base):
        def __call__(self, x):
            return x * super().scale()

    c = Child()
    _calls(c)
    Base.scale = lambda self: 7.0
    _calls(c)
    assert traced() == 2


def test_a_property_whose_global_is_rebound_retraces(traced):
    global OFFSET

    m = _make_shifted()()
    try:
        _calls(m)
        OFFSET = 5.0
        _calls(m)
    finally:
        OFFSET = 1.0
    _calls(m)
    assert traced() == 2  # (back to the first contents: the first trace again)


@pytest.mark.parametrize("container", ["list", "dict", "numpy"])
def test_a_class_level_container_mutated_in_place_retraces(container, traced):
    class Table:
        values = {"list": [1.0, 2.0], "dict": {"a": 1.0}, "numpy": np.ones(2)}[container]

        def __call__(self, x):
            return x * float(np.sum(np.asarray(list(self.items()))))

        def items(self):
            v = self.values
            return v.values() if isinstance(v, dict) else v

    m = Table()
    _calls(m)
    if container == "list":
        Table.values.append(3.0)
    elif container == "dict":
        Table.values["b"] = 4.0
    else:
        Table.values[0] = 9.0
    _calls(m)
    assert traced() == 2


def test_staticmethods_and_classmethods_replaced_retrace(traced):
    class Ops:
        k = 3.0

        @staticmethod
        def double(x):
            return x * 2

        @classmethod
        def factor(cls):
            return cls.k

        def __call__(self, x):
            return self.double(x) * self.factor()

    m = Ops()
    _calls(m)
    Ops.double = staticmethod(lambda x: x * 4)
    _calls(m)
    Ops.factor = classmethod(lambda cls: cls.k + 1)
    _calls(m)
    assert traced() == 3


def test_a_closure_over_the_class_itself_sees_its_attributes(traced):
    Scaled = _make_scaled()

    def f(x):
        count_trace()
        return x * Scaled.s

    for s in (2.0, 2.0, 5.0, 5.0):
        Scaled.s = s
        np.testing.assert_allclose(stable_jit(f)(X), X * s)
    assert traced() == 2


def test_an_unchanged_class_traces_once_however_often_the_closure_is_made(traced):
    Scaled = _make_scaled()
    models = [Scaled() for _ in range(5)]  # new instances of one class: one structure
    for m in models:
        _calls(m, 2)
    assert traced() == 1


def test_classes_of_installed_libraries_are_keyed_by_identity():
    # (Their registries change as users define classes; see the module's docstring.)
    assert not classes.is_user_class(jax.Array)
    assert not classes.is_user_class(int)
    assert not classes.is_user_class(np.ndarray)
    assert classes.is_user_class(_make_scaled())


def _rebinding_is_seen() -> bool:
    Scaled = _make_scaled()
    m = Scaled()
    _calls(m)
    Scaled.s = 3.0
    return bool(np.allclose(_closure(m)(X), X * 3.0))


def test_a_version_tag_that_does_not_change_would_go_stale(monkeypatch):
    assert _rebinding_is_seen()
    if native.NATIVE is None:
        pytest.skip("no accelerator: no version tags, the contents are compared item by item")
    # The shortcut made wrong: a tag that never changes hides the rebinding.
    monkeypatch.setattr(class_guards, "type_tag", lambda cls: 1)
    python_only = lambda state, s: (state.cls, state, state.holds, None)  # noqa: E731
    monkeypatch.setattr(class_guards, "class_check", python_only)
    monkeypatch.setattr("stablejit._fingerprint.container_guards.class_check", python_only)
    assert not _rebinding_is_seen()


def _over_instance(model):
    def f(x):
        return model(x)

    return f


def _built(f):
    for _ in range(2):
        stable_jit(f)(X)
    return code_info(f.__code__).fast.front


def test_every_form_agrees_on_a_class_changed_in_place():
    global OFFSET

    class Shifted:
        s = 2.0

        @property
        def offset(self):
            return OFFSET

        def __call__(self, x):
            return x * self.s + self.offset

    f = _over_instance(Shifted())
    record = _built(f)
    made = _agreement.forms(record, f.__code__)
    s = Shifted.s
    steps = [
        (lambda: None, True),
        (lambda: setattr(Shifted, "s", s), True),  # same value: tag changed, contents not
        (lambda: setattr(Shifted, "s", 4.0), False),
        (lambda: setattr(Shifted, "s", s), True),
        (lambda: globals().__setitem__("OFFSET", 3.0), False),  # tag unchanged
    ]
    try:
        for change, hit in steps:
            change()
            said = _agreement.agree(record, f.__code__, f, made)
            assert (said["interpreted"] is not None) is hit
    finally:
        OFFSET = 1.0


@pytest.mark.skipif(native.NATIVE is None, reason="the C accelerator is not built")
def test_native_deep_checks_made_wrong_are_caught(monkeypatch):
    # The accelerator trusts an unchanged tag only with the deep checks: told
    # there are none, it would miss a global a method reads being rebound.
    global OFFSET

    f = _over_instance(_make_shifted()())
    record = _built(f)
    real = class_guards.class_check
    wrong = lambda state, s: (*real(state, s)[:3], ())  # noqa: E731 - told: nothing deep
    monkeypatch.setattr(class_guards, "class_check", wrong)
    monkeypatch.setattr("stablejit._fingerprint.container_guards.class_check", wrong)
    made = _agreement.forms(record, f.__code__)
    try:
        OFFSET = 3.0
        with pytest.raises(_agreement.Disagreement, match="native"):
            _agreement.agree(record, f.__code__, f, made)
    finally:
        OFFSET = 1.0


def test_a_retrace_names_the_class_attribute_that_changed(explained):
    Scaled = _make_scaled()
    m = Scaled()
    _calls(m, 1)
    Scaled.s = 3.0
    _calls(m, 1)
    assert any("'obj'.__class__.s changed 2.0 → 3.0" in msg for msg in explained()), explained()


def test_a_large_class_level_numpy_array_written_in_place_retraces(traced):
    class Table:
        values = np.ones(2048, np.float32)  # past numpy_constant_bytes: baked, by contents

        def __call__(self, x):
            return x * self.values.sum()

    m = Table()
    _calls(m)
    Table.values[...] = 2.0
    _calls(m)
    assert traced() == 2


def test_classes_of_a_module_without_a_file_are_user_classes():
    # Code exec'd into a module made at run time (a notebook's cells, a generated program).
    import types

    module = types.ModuleType("made_at_run_time")
    exec(
        "class B:\n    s = 2.0\n\nclass M(B):\n    def f(self, x):\n        return x * self.s\n",
        module.__dict__,
    )
    m = module.M()
    g = stable_jit(lambda x: m.f(x))
    np.testing.assert_allclose(g(X), X * 2.0)
    module.B.s = 3.0
    np.testing.assert_allclose(g(X), X * 3.0)
    assert classes.is_user_class(module.B)


def test_classes_exec_d_without_a_module_name_are_user_classes():
    # exec(source, {}): the class statement finds no __name__ and names "builtins", the
    # interpreter's own module, as its module. Taken at its word, the class was a library's,
    # keyed by identity, and a global its property reads went stale.
    namespace = {"jnp": jnp}
    exec(
        "G = 2.0\n\nclass B:\n    @property\n    def gain(self):\n        return G\n\n"
        "class M(B):\n    pass\n",
        namespace,
    )
    assert namespace["M"].__module__ == "builtins"
    m = namespace["M"]()
    g = stable_jit(lambda x: x * m.gain)
    np.testing.assert_allclose(g(X), X * 2.0)
    namespace["G"] = 3.0
    np.testing.assert_allclose(g(X), X * 3.0)
    assert classes.is_user_class(namespace["M"])


@pytest.mark.parametrize(
    "where, says",
    [
        # The class's own property: walked, so the row is the global's array, baked.
        ("class M:", "'.__class__.gain.fget → global 'G' is another array (float32[], baked"),
        # A base's: M holds nothing of its own, and is one row, keyed by its contents.
        ("class B:", ".__class__: class M changed (an attribute of it or of a base, a method"),
    ],
)
def test_a_retrace_for_what_a_class_reaches_says_what_changed(explained, where, says):
    namespace = {"__name__": "user_program", "jnp": jnp}
    source = (
        f"G = jnp.asarray(2.0)\n{where}\n    @property\n    def gain(self):\n        return G\n"
    )
    if where == "class B:":
        source += "class M(B):\n    pass\n"
    exec(source, namespace)
    m = namespace["M"]()
    g = stable_jit(lambda x: x * m.gain)
    g(X)
    namespace["G"] = jnp.asarray(3.0)  # the same class object: what its property reads changed
    np.testing.assert_allclose(g(X), X * 3.0)
    (message,) = explained()
    assert says in message
    assert "a part compared by identity changed" not in message


def test_a_record_made_elsewhere_does_not_recheck_a_class_within_its_own_keying(caplog):
    # The class fuzzer's shrunk example: a method's record made at the top (it reads its
    # class, keyed there by contents) was matched again while that class's contents were
    # walked to be re-checked (it holds what no guard re-checks), which re-checked the
    # class, which walked its contents...: endless, until the recursion limit.
    import _fuzz_classes
    from _fuzz_values import Box, P, Pair

    z = jnp.array([[3 + 0j, 4, 5], [3, 4, 5]], dtype=jnp.complex64)
    ns = {"P": P, "jax": jax, "jnp": jnp, "np": np, "T": [], "__name__": "fuzz_classes"}
    ns.update(G1=z, GP=np.array([2, 3, 4], np.int8), GS=0.5)
    exec(compile(_fuzz_classes.SOURCE, "<fuzz class program>", "exec"), ns)
    m = ns["M"]({"z": Box(w=z, tag="y"), "y": -5, "x": Pair(a=-5, b=False)})
    f = ns["make"](jnp.arange(3, dtype=jnp.int32), m)
    x = jnp.ones(3)
    g = stable_jit(f)
    for change in (
        lambda: None,
        lambda: setattr(ns["M"], "act", eval("lambda self, x: x - P(G1) * P(self.k)", ns)),
        lambda: vars(m).__setitem__("v", Pair(np.array(0j, np.complex64), [{"x": 1.0}])),
        lambda: ns["Root"].table.append(5.0),
    ):
        change()
        np.testing.assert_allclose(g(x), f(x), rtol=2e-5)
    assert not [r for r in caplog.records if "cannot be keyed" in r.getMessage()]


def _scale():
    return OFFSET


def test_a_class_level_frozenset_is_rechecked_by_what_it_holds(traced):
    # A frozenset of atoms cannot change (the very object is its key); one of
    # functions can: a global they read rebound must still retrace.
    global OFFSET

    class Hooks:
        names = frozenset({"a", "b"})
        hooks = frozenset({_scale})

        def __call__(self, x):
            return x * len(self.names) + sum(h() for h in self.hooks)

    m = Hooks()
    try:
        _calls(m)
        OFFSET = 4.0
        _calls(m)
    finally:
        OFFSET = 1.0
    assert traced() == 2


@pytest.mark.skipif(native.NATIVE is None, reason="no accelerator: no version tags")
def test_the_accelerator_reads_a_version_tag_that_changes_with_the_class():
    # (Where it read none, every check would fall back to Python: correct, not fast.)
    Scaled = _make_scaled()
    before = native.NATIVE.type_tag(Scaled)
    assert before != 0
    assert native.NATIVE.type_tag(Scaled) == before
    Scaled.s = 3.0
    assert native.NATIVE.type_tag(Scaled) not in (0, before)
