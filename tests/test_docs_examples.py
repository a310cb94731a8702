"""The examples on the integration pages run, and their assertions hold."""

import re
from pathlib import Path

import pytest

PAGES = sorted((Path(__file__).parent.parent / "docs" / "integrations").glob("*.md"))
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_integration_page_examples_run(page):
    pytest.importorskip({"flax": "flax", "optax": "optax"}.get(page.stem, page.stem))
    for i, code in enumerate(BLOCK.findall(page.read_text())):
        exec(compile(code, f"{page.name}[{i}]", "exec"), {"__name__": f"docs_{page.stem}_{i}"})
