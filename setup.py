"""The optional C accelerator (stablejit/_speedups_c/); everything else is in pyproject.toml.

``optional=True``: where it cannot be compiled (no compiler), the install goes on without it
and stablejit runs its pure-Python path, which is complete.
"""

import importlib.util
from glob import glob

from setuptools import Extension, setup

# The sources' digest goes into the build, so that stablejit can tell a build older than its
# sources and leave it unloaded (stablejit/_source_digest.py says why). Loaded by its path:
# stablejit itself cannot be imported before it is installed.
_spec = importlib.util.spec_from_file_location("_sj_source_digest", "stablejit/_source_digest.py")
_digest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_digest)

setup(
    ext_modules=[
        Extension(
            "stablejit._speedups",
            sorted(glob("stablejit/_speedups_c/*.c")),
            depends=sorted(glob("stablejit/_speedups_c/*.h")),
            define_macros=[("SJ_SOURCE_DIGEST", f'"{_digest.source_digest()}"')],
            optional=True,
        )
    ]
)
