"""Reading stablejit's log records: the census's source for why it retraced.

stablejit explains itself through its ``stablejit`` logger, in sentences
meant for people. The census takes those records off the logger, parses
them into counts here, and drops them before they are printed (unless the
user had asked for them), so that the explanations appear once, summed up,
at the end. The patterns follow the wording in ``_diagnostics/explain.py``.
"""

from __future__ import annotations

import logging
import re

from .counts import CENSUS

_RETRACE = re.compile(r"^(?P<function>.*?) retraced: (?P<reasons>.*)$", re.S)
# "closure variable 'k' changed 1.0 → 2.0", "global 'S' was rebound: 2 → 3",
# "argument 0: f32[3] → f32[4]": the part before the values names what changed.
_CHANGE = re.compile(
    r"^(?P<what>.+?)(?P<sep> changed | was rebound: |: )(?P<values>.+ → .+)$", re.S
)


def changes(reasons: str) -> list[tuple[str, str]]:
    """``"closure variable 'k' changed 1.0 → 2.0; …"`` as
    ``[("closure variable 'k' changed", "1.0 → 2.0"), …]``: identical
    reasons with other values count together."""
    out = []
    for reason in reasons.split("; "):
        m = _CHANGE.match(reason)
        if m is None:
            out.append((reason, ""))
        else:
            verb = " was rebound" if "rebound" in m["sep"] else " changed"
            out.append((m["what"] + verb, m["values"]))
    return out


class RetraceFilter(logging.Filter):
    """Takes stablejit's retrace explanations off the ``stablejit`` logger.

    A filter rather than a handler: the records are counted, then dropped
    before any handler (or the root logger) prints them, unless the user had
    asked for them; stablejit's other messages pass untouched.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        m = _RETRACE.match(record.getMessage())
        if m is None:
            return True
        CENSUS.on_retrace(m["function"], changes(m["reasons"]))
        return CENSUS.show_retraces
