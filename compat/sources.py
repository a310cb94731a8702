"""Upstream test suites: downloaded from the package index, laid out to run.

sdists are fetched once into ``compat/.cache/sdist`` and unpacked into
``compat/.cache/src``. Only a suite's test folder and its pytest
configuration are copied into ``compat/.cache/suites/<name>-<version>``: run
from the unpacked sdist, the package's own source folder would shadow the
installed package (``python -m pytest`` puts the working folder on sys.path,
and blackjax's ``from tests import ...`` puts the sdist root there).

optax ships its tests inside the package, so its tests run from the
installed package in the environment itself.

A "git" suite (JAX's api_test.py, equinox, diffrax) is read from its
release's tag in the upstream repository: from the clone named by
``$COMPAT_GIT_<SUITE>`` (or ``--git-dir SUITE=PATH``), else from a
blobless bare clone the harness makes into ``compat/.cache/git/<suite>.git``.
Only the test paths and configuration are read out of the tag, file by file,
so a partial clone missing other blobs serves as well.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from compat.suites import CACHE, Suite


def _log(msg: str) -> None:
    print(f"[compat] {msg}", file=sys.stderr, flush=True)


def sdist(name: str, version: str, python: Path) -> Path:
    """The unpacked sdist of ``name==version``, downloaded if not cached.

    Downloaded with the target environment's own pip, so that a release
    requiring a newer Python than the harness's still resolves."""
    src = CACHE / "src" / f"{name}-{version}"
    if src.is_dir():
        return src
    dest = CACHE / "sdist"
    dest.mkdir(parents=True, exist_ok=True)
    archives = sorted(dest.glob(f"{name}-{version}.tar.gz"))
    if not archives:
        cmd = [str(python), "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
        cmd += [f"{name}=={version}", "-d", str(dest)]
        _log(" ".join(cmd))
        subprocess.run(cmd, check=True)
        archives = sorted(dest.glob(f"{name}-{version}.tar.gz"))
    if not archives:
        raise SystemExit(f"compat: no sdist {name}-{version}.tar.gz after download")
    tmp = CACHE / "src" / f".{name}-{version}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(archives[0]) as tar:
        tar.extractall(tmp, filter="data") if sys.version_info >= (3, 12) else tar.extractall(tmp)
    (top,) = list(tmp.iterdir())
    top.rename(src)
    tmp.rmdir()
    return src


def _installed_package_dir(python: Path, name: str) -> Path:
    code = f"import importlib.util as u; print(u.find_spec({name!r}).submodule_search_locations[0])"
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def git_dir(suite: Suite) -> Path:
    """A clone of ``suite``'s upstream repository holding its release tags."""
    given = os.environ.get(f"COMPAT_GIT_{suite.name.upper()}")
    if given:
        path = Path(given)
        return path / ".git" if (path / ".git").exists() else path
    path = CACHE / "git" / f"{suite.name}.git"
    if not path.exists():
        url = f"https://github.com/{suite.repo}"
        cmd = ["git", "clone", "-q", "--bare", "--filter=blob:none", url, str(path)]
        _log(" ".join(cmd))
        subprocess.run(cmd, check=True)
    return path


def _from_tag(suite: Suite, version: str, paths: list[str], dest: Path) -> None:
    """Writes ``paths`` (files or folders) as they are at the release's tag."""
    git = ["git", "--git-dir", str(git_dir(suite))]
    tag = suite.tag.format(version=version)
    listed = subprocess.run(
        [*git, "ls-tree", "-r", "--name-only", tag, "--", *paths],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    missing = [p for p in paths if not any(f == p or f.startswith(p + "/") for f in listed)]
    if missing:
        raise SystemExit(f"compat: {suite.name}: {missing} not at tag {tag}")
    for name in listed:
        blob = subprocess.run([*git, "show", f"{tag}:{name}"], capture_output=True, check=True)
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(blob.stdout)


def layout(suite: Suite, version: str, python: Path) -> tuple[Path, Path]:
    """``(workdir, base)``: where pytest runs, and what selection paths are
    relative to."""
    work = CACHE / "suites" / f"{suite.name}-{version}"
    if suite.source == "package":
        work.mkdir(parents=True, exist_ok=True)
        # An ini of our own fixes pytest's rootdir here, not in site-packages.
        (work / "pytest.ini").write_text("[pytest]\n")
        return work, _installed_package_dir(python, suite.name)
    wanted = [suite.test_dir, *(suite.config_files or ("pytest.ini",))]
    if not all((work / name).exists() for name in wanted):  # new, or the table changed
        tmp = work.with_name(work.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if suite.source == "git":
            _from_tag(suite, version, [suite.test_dir, *suite.config_files], tmp)
            shutil.rmtree(work, ignore_errors=True)
            tmp.rename(work)
            return work, work
        src = sdist(suite.name, version, python)
        shutil.copytree(src / suite.test_dir, tmp / suite.test_dir)
        for name in suite.config_files:
            shutil.copy2(src / name, tmp / name)
        if not suite.config_files:
            (tmp / "pytest.ini").write_text("[pytest]\n")
        shutil.rmtree(work, ignore_errors=True)
        tmp.rename(work)
    return work, work
