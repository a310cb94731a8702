"""The optional C accelerator (stablejit/_speedups_c/); everything else is in pyproject.toml.

``optional=True``: where it cannot be compiled (no compiler), the install goes on without it
and stablejit runs its pure-Python path, which is complete.
"""

from glob import glob

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "stablejit._speedups",
            sorted(glob("stablejit/_speedups_c/*.c")),
            depends=sorted(glob("stablejit/_speedups_c/*.h")),
            optional=True,
        )
    ]
)
