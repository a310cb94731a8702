"""Reading stablejit's log records: the census's source for why it retraced or fell back.

stablejit explains itself through its ``stablejit`` logger, in sentences
meant for people. The census takes those records off the logger, parses
them into counts here, and drops them before they are printed (unless the
user had asked for them), so that the explanations appear once, summed up,
at the end. The patterns follow the wording in ``_diagnostics/explain.py``
and ``_runtime/miss.py``; a fallback's own warning is still printed (it
says once what the census then counts).
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

# stablejit's fallbacks, as its logger words them (_runtime/miss.py, _diagnostics/explain.py): a
# callable that cannot be keyed, a variant whose arrays could not be substituted, variants past
# the recompile limit (stance "fallback"), and arrays baked in where a concrete value was needed.
_FUNCTION = r"^(?P<function>stable_jit\(.*\)(?: at \S+)?)"
_FALLBACKS = (
    (
        re.compile(
            _FUNCTION + r" (?P<reason>cannot be keyed \(.*\)): its calls run through a plain "
            r"jax\.jit",
            re.S,
        ),
        "plain jax.jit: {}",
    ),
    (
        re.compile(
            _FUNCTION + r" (?P<reason>could not substitute its lifted arrays at trace time "
            r"\(.*\)): this variant's calls run through a plain jax\.jit",
            re.S,
        ),
        "plain jax.jit for a variant: {}",
    ),
    (
        re.compile(
            _FUNCTION + r" has compiled (?P<reason>\d+ distinct variants "
            r"\(config\.recompile_limit=\d+\))\..* Later new variants run through a plain "
            r"jax\.jit",
            re.S,
        ),
        "plain jax.jit past {}",
    ),
    (
        re.compile(
            _FUNCTION + r" needs (?P<reason>.+ as a concrete value): keyed by its contents and "
            r"baked in",
            re.S,
        ),
        "baked in, keyed by contents: needs {}",
    ),
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


def fallback(message: str) -> tuple[str, str] | None:
    """``(function, reason)`` of a fallback's log message, or None."""
    for pattern, words in _FALLBACKS:
        m = pattern.match(message)
        if m is not None:
            return m["function"], words.format(m["reason"])
    return None


class RetraceFilter(logging.Filter):
    """Takes stablejit's retrace explanations and fallbacks off the ``stablejit`` logger.

    A filter rather than a handler: the records are counted, then retraces
    are dropped before any handler (or the root logger) prints them, unless
    the user had asked for them; stablejit's warnings pass untouched.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        m = _RETRACE.match(message)
        if m is not None:
            CENSUS.on_retrace(m["function"], changes(m["reasons"]))
            return CENSUS.show_retraces
        found = fallback(message)
        if found is not None:
            CENSUS.on_fallback(*found)
        # The census lowered the logger to INFO to see the baked arrays: other INFO records
        # stay as unseen as they were.
        return record.levelno >= logging.WARNING or CENSUS.show_info
