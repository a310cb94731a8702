"""Runs other libraries' own test suites against stablejit (see compat/README.md)."""
