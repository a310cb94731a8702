"""Code of an installed distribution is library code wherever it is installed.

Module-level functions of libraries are keyed by identity, never walked.
Libraries are told by where they are installed: the standard library, a
``site-packages``/``dist-packages`` folder, or any folder on ``sys.path``
that a distribution was installed into (its ``.dist-info`` lists the
package), such as a machine image's JAX on ``PYTHONPATH``. Code there that
no distribution installed, and editable installs, are user code.

So a library's internal state never makes a user's function retrace: a
registry that grows as users define classes (flax's of graph node types) is
read only through its module-level functions, which are keyed by identity.
"""

import importlib
import json
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import TRACED, count_trace

import stablejit
from stablejit import stable_jit
from stablejit._fingerprint import code as code_module
from stablejit._fingerprint.code import code_info, is_library_file
from stablejit._fingerprint.walk import fingerprint

_SOURCE = "SCALE = 2\n\ndef scaled(x):\n    return x * SCALE\n"


def _distribution(folder, name, files, *, editable=False):
    """Writes ``files`` (relative path → text) into ``folder`` and, as pip
    does, a ``.dist-info`` that lists them."""
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    info = folder / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    listed = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD", "../../bin/tool"]
    (info / "RECORD").write_text("".join(f"{p},,\n" for p in listed))
    if editable:
        url = {"url": "file:///src", "dir_info": {"editable": True}}
        (info / "direct_url.json").write_text(json.dumps(url))


@pytest.fixture
def scrub(tmp_path, monkeypatch):
    """A folder first on sys.path whose name is no installer's."""
    folder = tmp_path / "device-scrub"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    imported = set(sys.modules)
    yield folder
    for name in set(sys.modules) - imported:
        del sys.modules[name]


def test_a_package_installed_outside_site_packages_is_library_code(scrub):
    _distribution(scrub, "scrublib", {"scrublib/__init__.py": "", "scrublib/ops.py": _SOURCE})
    _distribution(scrub, "scrubmod", {"scrubmod.py": _SOURCE})
    ops = importlib.import_module("scrublib.ops")
    mod = importlib.import_module("scrubmod")
    for m in (ops, mod):
        assert is_library_file(m.__file__)
        assert code_info(m.scaled.__code__).library
        assert fingerprint(m.scaled)[0] is m.scaled  # keyed by identity, not walked


def test_code_in_the_same_folder_that_no_distribution_installed_is_user_code(scrub):
    _distribution(scrub, "scrubdep", {"scrubdep/__init__.py": ""})
    (scrub / "scrubproject").mkdir()
    (scrub / "scrubproject" / "__init__.py").write_text(_SOURCE)
    (scrub / "scrubscript.py").write_text(_SOURCE)
    (scrub / "scrubproject.egg-info").mkdir()  # what setuptools leaves in a project
    for name in ("scrubproject", "scrubscript"):
        m = importlib.import_module(name)
        assert not is_library_file(m.__file__)
        assert fingerprint(m.scaled)[0] is not m.scaled  # walked by structure


def test_an_editable_install_is_user_code(scrub):
    _distribution(scrub, "scrubedit", {"scrubedit/__init__.py": _SOURCE}, editable=True)
    m = importlib.import_module("scrubedit")
    assert not is_library_file(m.__file__)


def test_the_test_files_and_the_standard_library_keep_their_classification():
    assert not is_library_file(__file__)
    assert is_library_file(json.__file__)
    assert is_library_file("<frozen importlib._bootstrap>")
    assert not is_library_file("<string>")


def test_stablejit_itself_is_library_code_wherever_it_lies():
    # This checkout is on sys.path with no .dist-info: its tests are user
    # code, but stablejit's own functions and memo tables are machinery.
    assert is_library_file(stablejit.__file__)
    assert is_library_file(code_module.__file__)
    assert code_info(stablejit.while_loop.__code__).library


# A library keeping a registry of its node classes, filled as subclasses are
# defined (as flax keeps its graph node types), which its wrapper's nested
# function reads on every call through a module-level function.
_REGISTRY_LIB = """\
_RULES = {}


class Node:
    scale = 1.0

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _RULES[cls] = cls.scale


def rule(node):
    return _RULES[type(node)]


def bind(fn, node):
    def bound(x):
        return fn(x) * rule(node)

    return bound
"""


def _traces_across_a_registry_growing(scrub) -> int:
    """Calls a library-wrapped user function before and after a user class
    joins the library's registry; returns how many times it was traced."""
    _distribution(scrub, "scrubnodes", {"scrubnodes.py": _REGISTRY_LIB})
    nodes = importlib.import_module("scrubnodes")

    class Doubled(nodes.Node):
        scale = 2.0

    def shifted(x):
        count_trace()
        return x + 1.0

    before = len(TRACED)
    f = stable_jit(nodes.bind(shifted, Doubled()))
    x = jnp.arange(3.0)
    np.testing.assert_allclose(f(x), (x + 1.0) * 2.0)

    class Tripled(nodes.Node):  # the registry grows; nothing f computes changed
        scale = 3.0

    for _ in range(2):
        np.testing.assert_allclose(f(x), (x + 1.0) * 2.0)
    return len(TRACED) - before


def test_a_library_registry_growing_as_users_define_classes_does_not_retrace(scrub, record_checks):
    assert _traces_across_a_registry_growing(scrub) == 1


def test_walking_library_functions_would_retrace_on_their_registry(scrub, monkeypatch):
    # The shortcut made wrong: the library's files taken for user code, so
    # ``rule`` is walked and its global registry keyed by contents.
    real = code_module.is_library_file
    mine = str(scrub)
    monkeypatch.setattr(code_module, "is_library_file", lambda f: real(f) and mine not in f)
    assert _traces_across_a_registry_growing(scrub) == 2
