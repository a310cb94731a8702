"""A/B: this checkout's stablejit against stablejit at a git revision, on the hit path.

    python benchmarks/ab.py --baseline REV|FOLDER [--device gpu] [--rounds N] [--quick]

Imports both side by side in one process (the revision from ``git archive``,
under another package name) and times them interleaved, round by round, on
the seed case's redefined closure, every call a cache hit: each call waited
for (``block_until_ready``, as in ``seed.py``), a loop of calls waited for at
the end, and the observability case's hit path (explanations off, as
``observability.py`` times it); and hits over containers, which the fast
path re-checked only from 2026-12 on (before, they took the full walk): a
closure over a dict of 100 arrays, nested functions over a dict, and a
closure over a list of 100 plain objects (logits processors, four
attributes each); and a closure decorated with ``functools.wraps``, whose
``__wrapped__`` the fast path re-checked only from 2026-12-07 on. Reports per
call the median over rounds for each, and the ratio current / baseline. The
baseline's C accelerator is built as its install would build it (or not, under
``STABLEJIT_PURE_PYTHON=1``, which compares the pure-Python paths). Writes
``ab-<backend>.{json,md}`` under ``local-results/benchmarks/`` (``benchmarks/results/``
with ``--save``). Not part of ``python -m benchmarks``.
"""

from __future__ import annotations

import _harness

args = _harness.parse_args(
    __doc__, rounds=21, quick_rounds=5, extra={"baseline": "git revision to compare with"}
)

import functools  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import jax.numpy as jnp  # noqa: E402

sys.path.insert(0, str(_harness.ROOT))  # this checkout's stablejit, ahead of any installed one
import stablejit  # noqa: E402

N = 2000  # hits per round and variant
CASES = {
    "each_call_waited": "hit, each call waited for",
    "loop_waited_at_end": "hits in a loop, waited for at the end",
    "observability_explain_off": "observability hit path, explain off",
    "dict": "closure over a dict of 100 arrays",
    "nested": "nested functions over a dict",
    "objects": "closure over a list of 100 plain objects",
    "decorated": "closure decorated with functools.wraps",
}


def _dict_outer(stable_jit):
    params = {f"w{i}": jnp.ones(8) for i in range(100)}

    def outer(x):
        def inner(x):
            return x + params["w0"]

        return stable_jit(inner)(x)

    return outer


def _nested_outer(stable_jit):
    cfg = {"scale": 2.0, "shift": 1.0}

    def outer(x):
        def helper(y):
            return y * cfg["scale"]

        def inner(x):
            return helper(x) + cfg["shift"]

        return stable_jit(inner)(x)

    return outer


class _Processor:
    def __init__(self, i):
        self.name = f"processor-{i}"
        self.temperature = 1.0 + (i % 7) / 100
        self.top_k = 50 + i % 3
        self.enabled = i % 5 != 0


def _objects_outer(stable_jit):
    processors = [_Processor(i) for i in range(100)]

    def outer(x):
        def inner(x):
            return x * sum(p.temperature for p in processors if p.enabled)

        return stable_jit(inner)(x)

    return outer


def _logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


def _decorated_outer(stable_jit):
    def outer(x):
        @_logged
        def inner(x):
            return x * 2

        return stable_jit(inner)(x)

    return outer


def _git(*cmd: str) -> str:
    """Git's answer, or "" where there is no repository."""
    done = subprocess.run(["git", *cmd], cwd=_harness.ROOT, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def _loop(outer, a):
    def run():
        for _ in range(N):
            out = outer(a)
        out.block_until_ready()

    return run, 1


def main():
    if not args.baseline:
        raise SystemExit("--baseline REV is required")
    rev = args.baseline
    # (A tree whose history is not this one's, such as a device machine's copy,
    # names both: the baseline folder's REVISION, and this tree's $STABLEJIT_REVISION.)
    revision = Path(rev) / "REVISION"
    baseline_sha = _git("rev-parse", "--short", rev + "^{commit}") or (
        revision.read_text().strip() if revision.is_file() else rev
    )
    dirty = _git("status", "--porcelain", "--", "stablejit")
    named = os.environ.get("STABLEJIT_REVISION")
    current_label = named or (
        _git("rev-parse", "--short", "HEAD") + (" + uncommitted" if dirty else "")
    )
    mods = {"baseline": _harness.import_copy(rev, "stablejit_baseline"), "current": stablejit}
    a = jnp.arange(8.0)
    variants = {}
    for which, mod in mods.items():
        outer = _harness.nested_outer(mod.stable_jit)
        assert (outer(a) == a * 2).all()  # warm up; also checks the result
        variants[f"each_call_waited @ {which}"] = (lambda f=outer: f(a).block_until_ready(), N)
        variants[f"loop_waited_at_end @ {which}"] = _loop(outer, a)
        variants[f"observability_explain_off @ {which}"] = _harness.hit_batch(
            outer, a, N, mod.config
        )
        for case, make in (
            ("dict", _dict_outer),
            ("nested", _nested_outer),
            ("objects", _objects_outer),
            ("decorated", _decorated_outer),
        ):
            walked = make(mod.stable_jit)
            walked(a).block_until_ready()  # warm up
            variants[f"{case} @ {which}"] = _loop(walked, a)
    timings = _harness.interleaved(variants, args.rounds)
    # A round runs N hits of each variant, in one timed call or N.
    t = {
        case: {
            w: timings[f"{case} @ {w}"]["median_s"] * variants[f"{case} @ {w}"][1] / N for w in mods
        }
        for case in CASES
    }
    ratios = {case: t[case]["current"] / t[case]["baseline"] for case in CASES}
    fmt = _harness.fmt_time
    native = {w: mod._native.NATIVE is not None for w, mod in mods.items()}
    rows = [
        f"Per call, median over {args.rounds} interleaved rounds of {N} hits per variant; "
        "the C accelerator: "
        + ", ".join(f"{w} {'built' if n else 'not built'}" for w, n in native.items())
        + ".",
        "",
        f"| case | baseline `{rev}` ({baseline_sha}) | current ({current_label}) "
        "| current / baseline |",
        "|---|---:|---:|---:|",
        *(
            f"| {title} | {fmt(t[c]['baseline'])} | {fmt(t[c]['current'])} | **{ratios[c]:.3f}×** |"
            for c, title in CASES.items()
        ),
    ]
    _harness.write(
        "ab",
        args.out,
        {
            "benchmark": "ab",
            "environment": _harness.environment(),
            "baseline": {"rev": rev, "commit": baseline_sha},
            "current": current_label,
            "accelerator": native,
            "rounds": args.rounds,
            "hits_per_round": N,
            "per_call_median_s": t,
            "timings": timings,
            "ratios": {f"{c}_current_over_baseline": r for c, r in ratios.items()},
        },
        "\n".join(rows),
    )


if __name__ == "__main__":
    main()
