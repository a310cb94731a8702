"""Persistent mode: a fresh process skips tracing, lowering and compiling.

A static key is independent of object identity, so it can name a compiled
executable across processes. With ``config.persistent_dir`` set, the first
call of a key in a process looks on disk for an executable compiled by an
earlier process for the same key, argument signature and environment (JAX,
jaxlib, Python, backend, devices, the JAX settings that change a trace), and
runs it: no trace, no lowering, no compile. A miss compiles as usual and
writes the executable.

Why serialized executables, not ``jax.export``: an exported module must still
be lowered and compiled (or fetched from JAX's compilation cache) in the new
process; an executable is loaded and run.

Files are ``<dir>/<sha256>.sjx``: a header, the full key beside the
executable (a digest collision is detected, not trusted), and a SHA-256 of the
whole file (a torn or corrupted file is detected). Any failure to read, check
or load falls back to a normal compile: never a wrong result, never a crash.
Writes go to a temporary file renamed into place, so concurrent processes
writing the same entry each write a whole file. The directory is bounded by
``config.persistent_max_bytes``, least recently used files first.

Keys holding identity-only values (objects keyed by identity) have no
process-independent spelling and are not persisted.
"""

from __future__ import annotations

import enum
import hashlib
import importlib.metadata
import logging
import os
import pickle
import struct
import sys
import sysconfig
import tempfile
import types
from typing import Any

import jax
import jaxlib
import numpy as np

from .._config import config
from .._fingerprint.classes import ClassKey
from .._fingerprint.code import is_library_file
from .._fingerprint.kind import LEAF, LIFTED_SCALAR, MISSING, REF, TABLE, float_key
from .._fingerprint.sinks import SINK
from .._fingerprint.values import Identity
from .._markers import ByOwnEquality, IdRef
from .cache import serve

logger = logging.getLogger("stablejit")

_MAGIC = b"STABLEJIT-EXECUTABLE-1\n"
_SUFFIX = ".sjx"
# JAX settings that change what a trace computes.
_JAX_FLAGS = (
    "jax_enable_x64",
    "jax_default_matmul_precision",
    "jax_numpy_rank_promotion",
    "jax_numpy_dtype_promotion",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
    "jax_softmax_custom_jvp",
    "jax_enable_checks",
    "jax_debug_nans",
    "jax_debug_infs",
    "jax_disable_jit",
)


class NotPersistable(Exception):
    """A key part with no process-independent spelling."""


_ORIGINS: dict[str, str] = {}
_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"]) + os.sep


def _origin(modname: str) -> str:
    """What a module's contents are pinned by across processes: its package
    version for a library, a digest of its source file for user code (an
    edited file, or an upgraded package, must not reuse an old executable)."""
    origin = _ORIGINS.get(modname)
    if origin is not None:
        return origin
    mod = sys.modules.get(modname)
    file = getattr(mod, "__file__", None)
    if mod is None:
        raise NotPersistable(modname)
    if file is None:
        origin = "builtin"  # compiled into Python: pinned by its version
    elif os.path.realpath(file).startswith(_STDLIB):
        origin = "stdlib"  # pinned by the Python version
    elif is_library_file(file):
        top = modname.split(".")[0]
        version = getattr(sys.modules.get(top), "__version__", None)
        if version is None:
            try:  # slow (tens of ms): only for packages without __version__
                version = importlib.metadata.version(top)
            except importlib.metadata.PackageNotFoundError:
                raise NotPersistable(modname) from None
        origin = f"{top}=={version}"
    else:
        try:
            with open(file, "rb") as f:
                origin = "sha256:" + hashlib.sha256(f.read()).hexdigest()
        except OSError:
            raise NotPersistable(modname) from None
    _ORIGINS[modname] = origin
    return origin


_BY_NAME = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)
"""Objects spelled by their module and qualified name, as is any object whose
kind keys it by identity (stable_jit itself, say, where the accelerator makes
it a C object)."""


def _qualified(obj) -> str:
    """``module:qualname@origin`` of an importable module-level object,
    checked to resolve back to ``obj`` itself."""
    if isinstance(obj, types.ModuleType):
        if sys.modules.get(obj.__name__) is obj:
            return f"module:{obj.__name__}@{_origin(obj.__name__)}"
        raise NotPersistable(obj)
    mod = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(mod, str) or not isinstance(qualname, str) or "<locals>" in qualname:
        raise NotPersistable(obj)
    origin = _origin(mod)
    if origin.startswith("sha256:"):
        # User code: the name must lead back to this very object. A library's
        # name and version pin it, even where it re-binds a wrapped version.
        target = sys.modules.get(mod)
        for part in qualname.split("."):
            target = getattr(target, part, None)
        if target is not obj:
            raise NotPersistable(obj)
    return f"{mod}:{qualname}@{origin}"


_SENTINELS = {
    id(LEAF): "leaf",
    id(LIFTED_SCALAR): "lifted",
    id(MISSING): "missing",
    id(SINK): "sink",
    id(REF): "ref",
}


def _spell(v) -> Any:
    """``v`` (a key or part of one) as nested tuples of str, int, bytes and
    None, the same in every process."""
    t = type(v)
    if v is None or t is bool or t is int or t is str or t is bytes:
        return v
    if t is tuple:
        return ("t", *[_spell(x) for x in v])
    if t is list:  # e.g. a dict node's keys
        return ("l", *[_spell(x) for x in v])
    if t is float or t is complex:
        return ("f" if t is float else "c", float_key(v))
    if id(v) in _SENTINELS:
        return ("s", _SENTINELS[id(v)])
    if t is frozenset:
        return ("fs", *sorted((_spell(x) for x in v), key=repr))
    if t is ClassKey:  # a user class: by name and contents
        return ("class", _qualified(v.cls), _spell(v.content))
    if t is ByOwnEquality:
        return _spell(v.value)
    if t is IdRef:
        if isinstance(v.obj, type):
            return ("type", _qualified(v.obj))
        raise NotPersistable(v.obj)
    if v is Ellipsis:
        return ("ellipsis",)
    if isinstance(v, _BY_NAME) or isinstance(TABLE.get(t), Identity):
        return ("obj", _qualified(v))
    if isinstance(v, np.ufunc):
        return ("ufunc", v.__name__)
    if isinstance(v, np.dtype):
        return ("dtype", v.str, str(v))
    if isinstance(v, enum.Enum):
        return ("enum", _qualified(type(v)), v.name)
    if isinstance(v, (range, slice, jax.sharding.PartitionSpec)):
        return ("repr", _qualified(type(v)), repr(v))
    if isinstance(v, jax.tree_util.PyTreeDef):
        # Node by node: a custom node's auxiliary data is spelled like any
        # other value (its printed form need not be exact).
        data = v.node_data()
        if data is None:
            return ("leaf",)
        node_type, aux = data
        return ("node", _qualified(node_type), _spell(aux), *map(_spell, v.children()))
    if isinstance(v, jax.extend.core.Primitive):
        return ("primitive", _qualified(type(v)), v.name)
    if isinstance(v, jax.ShapeDtypeStruct):  # e.g. a flax model's shape tree
        return ("shape", v.shape, v.dtype.str, v.weak_type, _spell(v.sharding))
    if isinstance(v, jax.Device):
        return ("device", v.platform, v.id)
    if isinstance(v, jax.sharding.Mesh):
        # Its repr leaves out which device sits where.
        return ("mesh", repr(v), v.devices.shape, tuple(d.id for d in v.devices.flat))
    if isinstance(v, jax.sharding.Sharding):
        # Its repr names the mesh's shape, not its device order: the device
        # assignment (jax's own, in order) says that.
        devices = getattr(v, "_device_assignment", None)
        if devices is None:
            raise NotPersistable(v)
        return ("sharding", _qualified(type(v)), repr(v), tuple(d.id for d in devices))
    raise NotPersistable(v)


def _environment() -> tuple:
    devices = jax.devices()
    return (
        "env",
        jax.__version__,
        jaxlib.__version__,
        sys.version_info[:2],
        jax.default_backend(),
        tuple((d.platform, d.device_kind, d.id) for d in devices),
        tuple((name, repr(getattr(jax.config, name, None))) for name in _JAX_FLAGS),
    )


def _arg_signature(tree) -> tuple:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    out = []
    for x in leaves:
        if isinstance(x, jax.Array):
            if not x.is_fully_addressable:
                raise NotPersistable(x)
            out.append(("a", x.shape, x.dtype.str, x.weak_type, repr(x.sharding)))
        elif isinstance(x, np.ndarray):
            out.append(("np", x.shape, x.dtype.str))
        elif type(x) in (bool, int, float, complex):
            out.append(("py", type(x).__name__))
        elif isinstance(x, np.generic):
            out.append(("npscalar", x.dtype.str))
        else:
            raise NotPersistable(x)
    return (_spell(treedef), tuple(out))


def disk_key(key, leaves, args, kwargs) -> bytes | None:
    """The full on-disk key of a call, or None if it cannot be persisted
    (logged when ``config.explain_misses`` is on)."""
    try:
        spelled = (
            "stablejit-key",
            _spell(key),
            _arg_signature((list(leaves), list(args), kwargs)),
            _spell(_environment()),
        )
    except NotPersistable as e:
        if config.explain_misses:
            what = e.args[0] if e.args else "?"
            logger.warning(
                "stablejit: not persisted: %s has no spelling outside this process "
                "(it is keyed by identity, or by its own __eq__)",
                f"{type(what).__qualname__} {what!r:.60}",
            )
        return None
    return repr(spelled).encode()


def _path(full_key: bytes) -> str:
    return os.path.join(config.persistent_dir, hashlib.sha256(full_key).hexdigest() + _SUFFIX)


def load(full_key: bytes):
    """The executable stored for ``full_key``, or None."""
    path = _path(full_key)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        body, digest = data[:-32], data[-32:]
        if not body.startswith(_MAGIC) or hashlib.sha256(body).digest() != digest:
            raise ValueError("truncated or corrupted")
        pos = len(_MAGIC)
        (n,) = struct.unpack_from("<Q", body, pos)
        pos += 8
        if body[pos : pos + n] != full_key:
            raise ValueError("another key has this digest")
        payload, in_tree, out_tree = pickle.loads(body[pos + n :])
        from jax.experimental.serialize_executable import deserialize_and_load

        compiled = deserialize_and_load(payload, in_tree, out_tree)
    except Exception as e:  # noqa: BLE001 - any failure means "compile as usual"
        logger.warning("stablejit: ignoring persistent entry %s: %s", path, e)
        return None
    try:
        os.utime(path)  # recency, for eviction
    except OSError:
        pass
    return compiled


_JAX_CACHE_HITS = [0]


def _on_event(event: str, **_) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _JAX_CACHE_HITS[0] += 1


jax.monitoring.register_event_listener(_on_event)


def jax_cache_hits() -> int:
    """How many executables JAX's persistent compilation cache has served."""
    return _JAX_CACHE_HITS[0]


def save(full_key: bytes, compiled, jax_hits_before: int) -> bool:
    """Writes ``compiled`` for ``full_key``; False (logged) if it cannot be.

    Not if JAX's own persistent cache served an executable meanwhile (it may
    be this one): such an executable is not whole once serialized again
    (XLA:CPU: "Function ... not found" when it runs).
    """
    directory = config.persistent_dir
    if jax_cache_hits() != jax_hits_before:
        if config.explain_misses:
            logger.warning(
                "stablejit: not persisted: JAX's persistent compilation cache served the "
                "executable; it is persisted when compiled afresh"
            )
        return False
    try:
        from jax.experimental.serialize_executable import serialize

        payload, in_tree, out_tree = serialize(compiled)
        blob = pickle.dumps((payload, in_tree, out_tree), protocol=5)
        body = _MAGIC + struct.pack("<Q", len(full_key)) + full_key + blob
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body + hashlib.sha256(body).digest())
            os.replace(tmp, _path(full_key))
        except BaseException:
            os.unlink(tmp)
            raise
    except Exception as e:  # noqa: BLE001 - persisting is best effort
        logger.warning("stablejit: could not persist an executable: %s", e)
        return False
    _evict(directory, config.persistent_max_bytes)
    return True


def _evict(directory: str, max_bytes: int) -> None:
    try:
        files = []
        for entry in os.scandir(directory):
            if entry.name.endswith(_SUFFIX):
                st = entry.stat()
                files.append((st.st_mtime, st.st_size, entry.path))
    except OSError:
        return
    total = sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
        if total <= max_bytes:
            break
        try:
            os.unlink(path)
        except OSError:
            continue  # another process evicted it
        total -= size


def loaded_ready(compiled, jitted, entry, full_key: bytes):
    """The hot-path callable of an entry loaded from disk: the executable, or
    the entry's ``jax.jit`` for arguments it was not compiled for. An
    executable that fails to run is dropped, from the entry and the disk."""

    def ready(*args, **kwargs):
        try:
            return compiled(*args, **kwargs)
        except TypeError:
            return jitted(*args, **kwargs)
        except jax.errors.JaxRuntimeError as e:
            logger.warning("stablejit: dropping persistent entry that failed to run: %s", e)
            if entry.ready is ready:
                serve(entry, jitted)
            try:
                os.unlink(_path(full_key))
            except OSError:
                pass
            return jitted(*args, **kwargs)

    return ready
