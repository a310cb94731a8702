"""The documentation site builds with ``mkdocs build --strict``; the examples on its pages run."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import stablejit

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
# Pages whose examples are checked here (the integration pages: tests/test_docs_examples.py).
PAGES = ["why.md", "quickstart.md", "semantics.md", "integrations/flax.md"]
NEEDS = {"integrations/flax.md": "flax"}  # pages about an optional library


def test_mkdocs_build_strict(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings"):
        pytest.importorskip(module)
    site = tmp_path / "site"
    # From another directory: the config must not depend on the working directory.
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict"]
        + ["-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (site / "index.html").is_file()
    api = (site / "api" / "index.html").read_text()
    assert "stablejit.stable_jit" in api  # mkdocstrings rendered the reference
    bench = (site / "benchmarks" / "index.html").read_text()
    assert "<table>" in bench  # the committed results tables were included


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page):
    if page in NEEDS:
        pytest.importorskip(NEEDS[page])
    text = (ROOT / "docs" / page).read_text()
    blocks = BLOCK.findall(text)
    assert blocks, f"no python examples on {page}"
    explain = stablejit.config.explain_misses
    namespace = {"__name__": f"docs_{Path(page).stem}"}
    try:
        for i, code in enumerate(blocks):  # in order, as a reader would paste them
            exec(compile(code, f"{page}[{i}]", "exec"), namespace)
    finally:
        stablejit.config.explain_misses = explain
