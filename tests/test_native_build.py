"""A build of the C accelerator older than its sources is left unloaded, never run.

An editable install keeps its compiled extension across a ``git pull``. The extension and the
Python side share formats (a guard spec's items), so a stale build could raise where ``jax.jit``
works: ``_native.current`` compares the digest compiled into the build with the sources'.
"""

import logging
import shutil
import types
from pathlib import Path

import pytest

from stablejit import _native as native
from stablejit import _source_digest

_STALE = "0" * 16
_SOURCES = "1" * 16  # the digest of the sources beside the build, as these tests have it
# The checkout's C sources (an installed wheel, which these tests may run against, has none).
_CHECKOUT_SOURCES = Path(__file__).resolve().parents[1] / "stablejit" / "_speedups_c"


@pytest.fixture
def beside(monkeypatch):
    """Sources beside the build whose digest is ``_SOURCES``, installed or not."""
    monkeypatch.setattr(native, "source_digest", lambda: _SOURCES)


def _build(digest=None):
    """A stand-in for the compiled extension, carrying ``digest`` as a build would."""
    module = types.ModuleType("stablejit._speedups")
    if digest is not None:
        module.SOURCE_DIGEST = digest
    return module


def test_a_build_from_these_sources_is_loaded(beside):
    build = _build(_SOURCES)
    assert native.current(build) is build


def test_a_build_from_other_sources_is_left_unloaded_with_a_log_line(beside, caplog):
    with caplog.at_level(logging.INFO, logger="stablejit"):
        assert native.current(_build(_STALE)) is None
    assert "built from other sources" in caplog.text
    assert "pip install -e . --no-deps" in caplog.text


def test_a_build_older_than_the_digest_itself_is_left_unloaded(beside):
    assert native.current(_build()) is None


def test_a_build_with_no_sources_beside_it_is_trusted(monkeypatch):
    # An installed wheel: its sources stay in the sdist, so there is nothing to compare.
    monkeypatch.setattr(native, "source_digest", lambda: None)
    build = _build(_STALE)
    assert native.current(build) is build


def test_the_loaded_accelerator_is_built_from_the_sources_beside_it():
    # In a checkout (the sources lie there) the build must match them; a wheel carries none.
    sources = _source_digest.source_digest()
    if native.NATIVE is not None and sources is not None:
        assert native.NATIVE.SOURCE_DIGEST == sources


@pytest.fixture
def sources(tmp_path):
    if not _CHECKOUT_SOURCES.is_dir():
        pytest.skip("no C sources beside these tests")
    copy = tmp_path / "_speedups_c"
    shutil.copytree(_CHECKOUT_SOURCES, copy)
    return copy


def test_the_digest_changes_with_any_byte_of_any_c_source_or_header(sources):
    before = _source_digest.source_digest(sources)
    for path in sorted(sources.glob("*.[ch]")):
        text = path.read_bytes()
        path.write_bytes(text + b" ")
        assert _source_digest.source_digest(sources) != before, path.name
        path.write_bytes(text)
    assert _source_digest.source_digest(sources) == before


def test_the_digest_changes_when_a_source_is_renamed_or_added(sources):
    before = _source_digest.source_digest(sources)
    (sources / "module.c").rename(sources / "module2.c")
    renamed = _source_digest.source_digest(sources)
    assert renamed != before
    (sources / "extra.h").write_text("/* new */\n")
    assert _source_digest.source_digest(sources) not in (before, renamed)


def test_the_digest_ignores_what_is_not_compiled(sources):
    before = _source_digest.source_digest(sources)
    (sources / "README.md").write_text("changed\n")
    assert _source_digest.source_digest(sources) == before


def test_no_sources_give_no_digest(tmp_path):
    assert _source_digest.source_digest(tmp_path) is None
