"""The optional C accelerator (stablejit/_speedups.c); everything else is in pyproject.toml.

``optional=True``: where it cannot be compiled (no compiler), the install goes on without it
and stablejit runs its pure-Python path, which is complete.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("stablejit._speedups", ["stablejit/_speedups.c"], optional=True)])
