"""The examples on the integration pages run, and their assertions hold."""

import re
from pathlib import Path

import pytest

PAGES = sorted((Path(__file__).parent.parent / "docs" / "integrations").glob("*.md"))
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def test_integration_pages_are_found():
    # An empty list would parametrise no test below, and pass.
    assert PAGES, "no pages under docs/integrations"


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_integration_page_examples_run(page):
    blocks = BLOCK.findall(page.read_text())
    # Checked before the library is looked for: a page whose examples are
    # fenced otherwise (```py, ```Python) would run nothing, and pass.
    assert blocks, f"{page.name} has no ```python block to run"
    pytest.importorskip(page.stem)  # each page is named after its library
    for i, code in enumerate(blocks):
        exec(compile(code, f"{page.name}[{i}]", "exec"), {"__name__": f"docs_{page.stem}_{i}"})
