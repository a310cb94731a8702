"""The table of kinds, and :func:`classify`: which kind a value is.

Exact types are looked up in ``kind.TABLE``; any other type is classified
once, by its bases (arrays, identity, values, partials, functions, pytree
nodes, then plain objects), unless a user (:func:`register_user_kind`) or
a library entry (:data:`LIBRARY_KINDS`) says otherwise, and remembered.
A new kind is one class in its family's module and one line here.
"""

from __future__ import annotations

import enum
import functools
import types
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax import core as _core
from jax.extend import core as _ext_core

from .. import _native
from .._markers import Sentinel
from .callables import Function, Jitted, Method, Partial
from .classes import ClassKind, Descriptor
from .code import forget_records
from .containers import Dict, List, Pytree, TreeDef, Tuple, is_pytree_node
from .kind import LEAF_KIND, TABLE, TABLE_LOCK, Kind, forget_kind, register_kind
from .objects import CopiedObject, Object, plain_kind
from .proxies import PROXY
from .values import (
    Complex,
    Constant,
    Float,
    HostArray,
    Identity,
    IdentityRef,
    NoneKind,
    NumpyScalar,
    Scalar,
    Set,
    Str,
    Value,
)

IDENTITY = Identity()
IDENTITY_REF = IdentityRef()
VALUE = Value()
_FUNCTION = Function()
_PYTREE = Pytree()

for _cls, _kind in {
    int: Scalar(),
    bool: Scalar(),
    str: Str(),
    bytes: Scalar(),
    float: Float(),
    complex: Complex(),
    type(None): NoneKind(),
    type(...): IDENTITY,
    type(NotImplemented): IDENTITY,
    tuple: Tuple(),
    list: List(),
    dict: Dict(),
    set: Set(),
    frozenset: Set(),
    types.FunctionType: _FUNCTION,
    types.MethodType: Method(),
    np.dtype: VALUE,
    np.ndarray: HostArray(),
    range: VALUE,
    type(jax.jit(lambda x: x)): Jitted(),
    Sentinel: IDENTITY,
    type(jax.tree_util.tree_structure(0)): TreeDef(),
    weakref.ProxyType: PROXY,
    weakref.CallableProxyType: PROXY,
    type: ClassKind(IDENTITY),
    property: Descriptor(("fget", "fset", "fdel")),
    staticmethod: Descriptor(("__func__",)),
    classmethod: Descriptor(("__func__",)),
    functools.cached_property: Descriptor(("func",)),
}.items():
    register_kind(_cls, _kind)
if _native.NATIVE is not None:
    # stable_jit itself, where the accelerator makes it a C object (its
    # Front): one for the process, immutable, read by the functions that
    # call it.
    register_kind(_native.NATIVE.Front, IDENTITY)

ARRAY_BASES = (jax.Array, np.ndarray, _core.Tracer)
_IDENTITY_BASES = (
    type,
    types.ModuleType,
    types.BuiltinFunctionType,
    types.BuiltinMethodType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    types.MemberDescriptorType,
    types.GetSetDescriptorType,
    np.ufunc,
    _ext_core.Primitive,
)
_VALUE_BASES = (
    enum.Enum,
    np.dtype,
    jax.sharding.Sharding,
    jax.sharding.Mesh,
    jax.sharding.PartitionSpec,
    jax.ShapeDtypeStruct,
    jax.Device,
    slice,
)


def eq_is_identity(cls) -> bool:
    # Builtin functions compare by (self, C function): identity in effect.
    return cls.__eq__ is object.__eq__ or issubclass(
        cls, (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodDescriptorType)
    )


LIBRARY_KINDS: dict[str, Kind | Callable[[type], Kind]] = {
    # A flax module's counter id, fresh for every module object. Flax uses it
    # only to preserve sharing between modules, which the walk already sees
    # as object identity; keyed by value, every rebuilt model would miss.
    "flax.ids.FlaxId": Constant(),
    # flax's lifted jit passes its scope functions to the traced function
    # through this thread-local stack, pushed around each call, and keys what
    # they depend on itself, in a static "fingerprint" argument: flax relies
    # on jax.jit not keying it. Keyed, every call of an nn.jit method missed.
    "flax.core.lift.TransformContext": Constant(),
    # What a flax Scope keeps of the trace it was made under, to refuse use
    # under another: a new object per trace (every jax.grad), never an input
    # to the computation.
    "jax._src.core.OpaqueTraceState": Constant(),
    # Immutable to JAX, which caches what it derives from one by identity:
    # its lifted constants are substituted in a copy (see CopiedObject).
    # (Named where this JAX defines it: jax._src.core until 0.11, elsewhere since.)
    f"{_ext_core.ClosedJaxpr.__module__}.{_ext_core.ClosedJaxpr.__qualname__}": CopiedObject,
    # transformers stores hash(config), which PYTHONHASHSEED changes, to tell
    # later whether the user edited the config: keyed by that meaning, so a
    # model's key is the same in every process (persistent mode).
    "transformers.generation.configuration_utils.GenerationConfig": lambda cls: Object(
        cls, derived={"_original_object_hash": lambda c: c._original_object_hash == hash(c)}
    ),
    # A test case's traced functions close over ``self`` for its assertions
    # and parameters; unittest's bookkeeping there (the running result,
    # cleanups) never changes what is traced, and reaches the whole test
    # runner: left out of the key.
    "unittest.case.TestCase": lambda cls: Object(
        cls, skip=frozenset({"_outcome", "_cleanups", "_subtest", "_type_equality_funcs"})
    ),
}
"""Kinds of library types and their subclasses, by qualified name, so that the
library need not be imported to declare them; a function of the class makes
one kind per class."""

USER_KINDS: dict[type, Kind] = {}
"""Kinds users declared (see register_type), for a class and its subclasses."""
_CLASSIFIED: set[type] = set()  # types classify() chose a kind for


def register_user_kind(cls: type, kind: Kind | None) -> None:
    """Makes ``kind`` the kind of ``cls`` and its subclasses (None: the
    default), replacing what classify() had chosen for them."""
    with TABLE_LOCK:
        if kind is None:
            USER_KINDS.pop(cls, None)
        else:
            USER_KINDS[cls] = kind
        for t in [t for t in _CLASSIFIED | {cls} if issubclass(t, cls)]:
            _CLASSIFIED.discard(t)
            forget_kind(t)
        forget_records()


def classify(v: Any) -> Kind:
    """Returns (and remembers per type) the kind of ``v``."""
    cls = type(v)
    kind = TABLE.get(cls)
    if kind is not None:
        return kind
    user = next((USER_KINDS[c] for c in cls.__mro__ if c in USER_KINDS), None)
    if user is None:
        names = (f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__)
        user = next((LIBRARY_KINDS[n] for n in names if n in LIBRARY_KINDS), None)
        if user is not None and not isinstance(user, Kind):
            user = user(cls)
    if user is not None:
        kind = user
    elif issubclass(cls, ARRAY_BASES):
        kind = LEAF_KIND
    elif issubclass(cls, np.generic):
        kind = NumpyScalar()
    elif issubclass(cls, type):  # a metaclass: its classes may be user classes
        kind = ClassKind(IDENTITY if eq_is_identity(cls) else IDENTITY_REF)
    elif issubclass(cls, _IDENTITY_BASES):
        kind = IDENTITY if eq_is_identity(cls) else IDENTITY_REF
    elif issubclass(cls, _VALUE_BASES):
        kind = VALUE
    elif issubclass(cls, functools.partial):
        kind = Partial()
    elif issubclass(cls, types.FunctionType):
        kind = _FUNCTION
    elif issubclass(cls, (float,)):
        kind = Float()
    elif is_pytree_node(cls, v):
        kind = _PYTREE
    else:
        kind = plain_kind(cls, v)
    register_kind(cls, kind)
    with TABLE_LOCK:
        _CLASSIFIED.add(cls)
    return kind
