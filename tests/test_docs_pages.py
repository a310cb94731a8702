"""The examples on the Limitations page run, and their assertions (what is and is not seen
today) hold: a change there must change the page."""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
PAGES = ["limitations.md"]
EXAMPLES = [
    (page, i, code)
    for page in PAGES
    for i, code in enumerate(BLOCK.findall((DOCS / page).read_text()))
]


@pytest.mark.parametrize(
    "page,i,code", EXAMPLES, ids=[f"{p.removesuffix('.md')}[{i}]" for p, i, _ in EXAMPLES]
)
def test_page_example_runs(page, i, code):
    exec(compile(code, f"{page}[{i}]", "exec"), {"__name__": f"docs_{i}"})
