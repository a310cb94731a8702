"""Architecture checks: no import cycles, small modules, and ``import stablejit`` starts no backend.

They read the package from disk (every ``.py`` file under ``stablejit/``, however deep), so they
hold for any layout of subpackages. Only the standard library and pytest.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from collections import deque
from itertools import pairwise
from pathlib import Path

import pytest

PACKAGE = "stablejit"
REPO = Path(__file__).resolve().parents[1]
PACKAGE_DIR = REPO / PACKAGE

MAX_LINES = 400

# Edges into the top-level package (``stablejit/__init__.py``, the public facade) are left out
# of the cycle check: the facade imports everything, and only modules meant to sit above it all
# may import it, such as the entry points
#   stablejit/__main__.py   (``python -m stablejit``)
#   stablejit/pytest.py     (the pytest plugin)
#   stablejit/_census/      (the census package: "Nothing here is imported by the rest of
#                            stablejit"; it did ``import stablejit`` at 2f665ee)
# ``from stablejit import _census`` is an edge to the package ``stablejit._census`` and counts.
# Every other edge counts, lazy imports (inside functions, ``if`` and ``try`` blocks) included.
FACADE = PACKAGE


# --- the module graph ---------------------------------------------------------------------------


def find_modules(package_dir: Path) -> tuple[dict[str, Path], set[str]]:
    """Every module under ``package_dir`` by dotted name, and the names of its packages.

    A package's ``__init__.py`` is the package module itself. A directory holding ``.py`` files
    but no ``__init__.py`` counts as a (namespace) package too.
    """
    package_dir = Path(package_dir)
    base = package_dir.parent
    modules: dict[str, Path] = {}
    packages: set[str] = {package_dir.name}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(base).with_suffix("").parts
        if not all(part.isidentifier() for part in parts):
            continue
        for i in range(1, len(parts)):
            packages.add(".".join(parts[:i]))
        if parts[-1] == "__init__":
            parts = parts[:-1]
            packages.add(".".join(parts))
        modules[".".join(parts)] = path
    return modules, packages


class Edge:
    """One import statement of a stablejit module: where it is and whether it runs lazily."""

    __slots__ = ("file", "line", "lazy")

    def __init__(self, file: str, line: int, lazy: bool):
        self.file = file  # relative to the package's parent directory
        self.line = line
        self.lazy = lazy  # inside a function: runs when called, not at import


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node in ``tree`` (the whole tree), with whether it sits in a def."""
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, lazy = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, lazy
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def import_graph(package_dir: Path) -> tuple[dict[str, set[str]], dict[tuple[str, str], Edge]]:
    """The graph of imports between the modules of the package at ``package_dir``.

    Returns ``graph`` (module -> the modules it imports) and, for each edge, the first import
    statement that makes it (for messages). ``import a.b.c`` is an edge to ``a.b.c`` alone (not
    to the parent packages it also runs); ``from a.b import x`` is an edge to the submodule
    ``a.b.x`` where there is one, else to the package ``a.b``. Relative imports resolve against
    the importing module's package. Edges into the facade (``FACADE``) are dropped.
    """
    modules, packages = find_modules(package_dir)
    root = Path(package_dir).name
    known = set(modules) | packages

    def owner(name: str) -> str | None:
        """The longest known module that ``name`` is, or lies in (None: not one of ours)."""
        if name != root and not name.startswith(root + "."):
            return None
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        return name

    graph: dict[str, set[str]] = {name: set() for name in modules}
    edges: dict[tuple[str, str], Edge] = {}
    for name, path in modules.items():
        file = path.relative_to(Path(package_dir).parent).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        this_package = name if name in packages else name.rpartition(".")[0]
        for node, lazy in _imports(tree):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [owner(alias.name) for alias in node.names]
            else:
                if node.level:
                    anchor = this_package.split(".")
                    if node.level - 1 >= len(anchor):
                        continue  # beyond the top-level package: not ours
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in known else owner(base))
            for target in targets:
                if target is None or target == FACADE or target == name:
                    continue
                graph[name].add(target)
                edges.setdefault((name, target), Edge(file, node.lineno, lazy))
    return graph, edges


# --- cycles -------------------------------------------------------------------------------------


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def _shortest_cycle(graph: dict[str, set[str]], start: str, within: set[str]) -> list[str]:
    """The shortest chain start -> ... -> start inside ``within`` (breadth first)."""
    previous: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph.get(node, ())):
            if child not in within:
                continue
            if child == start:
                chain = [node]
                while chain[-1] != start:
                    chain.append(previous[chain[-1]])
                return [*reversed(chain), start]
            if child not in previous:
                previous[child] = node
                queue.append(child)
    return [start]


def find_cycles(graph: dict[str, set[str]]) -> list[tuple[list[str], list[list[str]]]]:
    """Each import cycle: (its modules, chains that show it).

    A cycle here is a strongly connected component of more than one module. Listing every
    elementary cycle could run to thousands, so each component comes with a few short chains
    that between them pass through all its modules.
    """
    result = []
    for component in strongly_connected(graph):
        if len(component) < 2:
            continue
        within = set(component)
        covered: set[str] = set()
        chains = []
        for module in component:
            if module not in covered:
                chain = _shortest_cycle(graph, module, within)
                covered.update(chain)
                chains.append(chain)
        result.append((component, chains))
    return result


def describe_cycles(cycles, edges: dict[tuple[str, str], Edge]) -> str:
    lines = []
    for n, (component, chains) in enumerate(cycles, 1):
        lines.append(f"cycle {n}: {len(component)} modules: {', '.join(component)}")
        for chain in chains:
            lines.append("    " + " -> ".join(chain))
            for source, target in pairwise(chain):
                edge = edges[source, target]
                lazy = " (lazy: inside a function)" if edge.lazy else ""
                lines.append(f"        {source} -> {target}  at {edge.file}:{edge.line}{lazy}")
    return "\n".join(lines)


def test_no_import_cycles():
    graph, edges = import_graph(PACKAGE_DIR)
    assert len(graph) > 1, f"no modules found under {PACKAGE_DIR}"
    cycles = find_cycles(graph)
    assert not cycles, (
        f"{len(cycles)} import cycle(s) between stablejit modules "
        f"(edges into the facade {FACADE!r} are not counted):\n" + describe_cycles(cycles, edges)
    )


# --- the graph builder and cycle finder on throwaway packages ----------------------------------


def _write_package(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (relative path -> source) as package ``stablejit`` under ``root``."""
    for relative, source in files.items():
        path = root / PACKAGE / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    return root / PACKAGE


_ACYCLIC = {
    "__init__.py": "from ._front import api\nfrom .sub import deep\n",
    "_front.py": "from . import _base\nfrom .sub.deep import helper\n\ndef api():\n    pass\n",
    "_base.py": "import os\n\nfrom jax import numpy\n",
    "sub/__init__.py": '"""A subpackage."""\nfrom ..sub import deep as _deep\n',
    "sub/deep.py": (
        "import stablejit._base\n"
        "from stablejit import api  # the facade: not counted\n"
        "\n"
        "def helper():\n"
        "    pass\n"
    ),
    "__main__.py": "import stablejit\nfrom stablejit import _front\n",
}


def test_graph_resolves_imports(tmp_path):
    package = _write_package(tmp_path, _ACYCLIC)
    graph, edges = import_graph(package)
    assert graph == {
        "stablejit": {"stablejit._front", "stablejit.sub.deep"},
        "stablejit._front": {"stablejit._base", "stablejit.sub.deep"},
        "stablejit._base": set(),
        "stablejit.sub": {"stablejit.sub.deep"},
        "stablejit.sub.deep": {"stablejit._base"},
        "stablejit.__main__": {"stablejit._front"},
    }
    assert find_cycles(graph) == []
    assert edges["stablejit._front", "stablejit._base"].line == 1


def test_graph_name_from_package_init_is_edge_to_package(tmp_path):
    package = _write_package(
        tmp_path,
        {
            "__init__.py": "",
            "pkg/__init__.py": "VALUE = 1\n",
            "pkg/mod.py": "",
            "a.py": "from .pkg import VALUE, mod\nfrom stablejit.pkg.mod import thing\n",
            "b.py": "from stablejit import pkg\nimport stablejit.pkg.mod\n",
            "pkg/c.py": "from . import VALUE\nfrom .. import a\nfrom ... import outside\n",
        },
    )
    graph, _ = import_graph(package)
    assert graph["stablejit.a"] == {"stablejit.pkg", "stablejit.pkg.mod"}
    assert graph["stablejit.b"] == {"stablejit.pkg", "stablejit.pkg.mod"}
    assert graph["stablejit.pkg.c"] == {"stablejit.pkg", "stablejit.a"}


def test_cycle_through_lazy_and_relative_imports_is_found(tmp_path):
    package = _write_package(
        tmp_path,
        {
            "__init__.py": "from . import _a\n",
            "_a.py": "from . import _b\n",
            "_b.py": "import os\n\nfrom .inner import _c\n",
            "inner/__init__.py": "",
            # the cycle closes lazily, in a method, under an `if` inside a `try`
            "inner/_c.py": (
                "class C:\n"
                "    def m(self):\n"
                "        try:\n"
                "            if True:\n"
                "                from .. import _a\n"
                "        except ImportError:\n"
                "            pass\n"
            ),
            "_d.py": "from stablejit._e import x\n",
            "_e.py": "def f():\n    import stablejit._d\n",
        },
    )
    graph, edges = import_graph(package)
    cycles = find_cycles(graph)
    assert [component for component, _ in cycles] == [
        ["stablejit._a", "stablejit._b", "stablejit.inner._c"],
        ["stablejit._d", "stablejit._e"],
    ]
    assert cycles[0][1] == [["stablejit._a", "stablejit._b", "stablejit.inner._c", "stablejit._a"]]
    assert edges["stablejit.inner._c", "stablejit._a"].lazy
    assert not edges["stablejit._a", "stablejit._b"].lazy
    message = describe_cycles(cycles, edges)
    assert "stablejit._a -> stablejit._b -> stablejit.inner._c -> stablejit._a" in message
    assert "stablejit._d -> stablejit._e -> stablejit._d" in message
    assert "at stablejit/inner/_c.py:5 (lazy: inside a function)" in message


def test_imports_of_the_facade_make_no_cycle(tmp_path):
    package = _write_package(
        tmp_path,
        {
            "__init__.py": "from ._x import f\n",
            "_x.py": "def f():\n    import stablejit\n    from stablejit import f\n",
        },
    )
    graph, _ = import_graph(package)
    assert find_cycles(graph) == []


def test_cycle_finder_on_graphs():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    # two loops sharing a node: one component, chains covering all of it
    graph = {"a": {"b", "c"}, "b": {"a"}, "c": {"d"}, "d": {"a"}, "e": {"a"}}
    [(component, chains)] = find_cycles(graph)
    assert component == ["a", "b", "c", "d"]
    assert chains == [["a", "b", "a"], ["c", "d", "a", "c"]]
    # deep chains do not hit the recursion limit
    n = 5000
    ring = {f"m{i}": {f"m{(i + 1) % n}"} for i in range(n)}
    [(component, _)] = find_cycles(ring)
    assert len(component) == n


# --- module size --------------------------------------------------------------------------------


def test_modules_stay_small():
    sizes = {
        path.relative_to(REPO).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for suffix in ("py", "c", "h")  # the C accelerator's sources are modules too
        for path in PACKAGE_DIR.rglob(f"*.{suffix}")
    }
    assert sizes, f"no modules found under {PACKAGE_DIR}"
    over = sorted(((n, name) for name, n in sizes.items() if n > MAX_LINES), reverse=True)
    assert not over, f"{len(over)} module(s) over {MAX_LINES} lines:\n" + "\n".join(
        f"    {name}: {n} lines" for n, name in over
    )


# --- import starts no backend -------------------------------------------------------------------

# Run in a fresh interpreter. Before stablejit is imported, jax's backend initialiser is wrapped
# so that the first call records where it came from: a failure names the stablejit line.
_PROBE = """
import sys, traceback

import jax

try:
    from jax._src import xla_bridge
except ImportError:  # a jax without it: only the jax_num_cpu_devices check below
    xla_bridge = None

first_init = []
_backends = getattr(xla_bridge, "backends", None)
if _backends is not None:
    def _recording_backends(*args, **kwargs):
        if not first_init:
            frames = [f for f in traceback.extract_stack()[:-1] if "importlib" not in f.filename]
            first_init.append("".join(traceback.format_list(frames)))
        return _backends(*args, **kwargs)
    xla_bridge.backends = _recording_backends

import stablejit

print("stablejit from", stablejit.__file__)

def fail(why):
    print("FAIL:", why)
    if first_init:
        print("the backend was first initialised here:")
        print(first_init[0])
    sys.exit(1)

initialised = getattr(xla_bridge, "backends_are_initialized", None)
if initialised is not None and initialised():
    fail("`import stablejit` initialised a jax backend")
if first_init:
    fail("`import stablejit` initialised a jax backend")

# jax_num_cpu_devices only takes effect before the backend starts: jax raises on a late update
# (or, in older versions, ignores it).
try:
    jax.config.update("jax_num_cpu_devices", 4)
except RuntimeError as error:
    fail(f"too late to set jax_num_cpu_devices after `import stablejit`: {error}")
except AttributeError:
    print("SKIP-DEVICES: this jax has no jax_num_cpu_devices")
    sys.exit(0)
n = len(jax.devices())
if n != 4:
    fail(f"jax_num_cpu_devices=4 set after `import stablejit` gave {n} device(s)")
print("OK")
"""


def import_probe(root: Path) -> subprocess.CompletedProcess:
    """Run the probe on the ``stablejit`` found in ``root`` (a fresh CPU-only interpreter)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("JAX_PLATFORMS", "JAX_NUM_CPU_DEVICES", "XLA_FLAGS")
    }
    env["JAX_PLATFORMS"] = "cpu"  # no GPU/TPU probing
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", _PROBE],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_initialises_no_backend():
    result = import_probe(REPO)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"exit status {result.returncode}:\n{output}"
    assert f"stablejit from {PACKAGE_DIR}" in result.stdout, output
    if "SKIP-DEVICES" in result.stdout:
        pytest.skip("the installed jax has no jax_num_cpu_devices")
    assert result.stdout.rstrip().endswith("OK"), output
