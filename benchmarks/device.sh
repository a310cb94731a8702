#!/usr/bin/env bash
# The device measurements, as one prepared run for a session lent a device machine.
#
#   bash benchmarks/device.sh                 # an NVIDIA GPU, from the repository root
#   DEVICE=tpu bash benchmarks/device.sh      # a TPU (run with carry: [".whl-tpu"])
#   DEVICE=cpu RESULTS=/tmp/r bash benchmarks/device.sh  # the same steps here, to check it
#
# GPU: the device's python3 already holds JAX with CUDA wheels and every package
# the cases need (optax, equinox, flax, cloudpickle, xxhash, matplotlib, pytest,
# hypothesis), and nothing can be installed there, so stablejit runs from this
# tree. transformers there is 5.x, without Flax generation: the hf cases are
# left out.
#
# TPU: the machine's python3 holds JAX, numpy, pytest and hypothesis (on
# PYTHONPATH), has its own package index (file:///opt/pypi/simple, without
# equinox or chex) and reaches nothing else. The first step installs the rest
# under /tmp, on PYTHONPATH *after* the machine's JAX (folders named
# site-packages: see the install step): the wheels in .whl-tpu/
# (gitignored through .git/info/exclude, carried by the device call) with
# --no-deps, then, for each module still missing, that package from the index.
# Make the wheels here (pure Python, or cp311 manylinux x86-64; the versions of
# the dev venv, which run on JAX 0.10.2; the second line is for the core tests
# of flax and blackjax, which are skipped without them):
#
#   P="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
#   W="pip download --no-deps --only-binary=:all: --python-version 3.11 --implementation cp $P"
#   $W -d .whl-tpu cloudpickle xxhash equinox jaxtyping wadler_lindig optax absl-py typing_extensions
#   $W -d .whl-tpu flax msgpack rich markdown-it-py mdurl pygments treescope pyyaml etils blackjax
#   $W -d .whl-tpu/plot matplotlib contourpy cycler fonttools kiwisolver packaging pillow \
#       pyparsing python-dateutil tzdata
#
# One program at a time can hold a TPU, and each one that opens it spends some
# 10 s doing so; the steps run one after another (persistent.py's children
# too). INSTALL=1 runs the install step on any device (to check it here).
#
# The results land in benchmarks/results/ (or $RESULTS) and, packed, in
# $OUT/results-<device>.tar.gz with the log (the device tool brings back at
# most 8 files). The archive is rewritten after every step, so a run cut off by
# the device's time limit still brings back what finished. STEPS=a,b,... runs
# only the steps named (install, versions, core tests, suite, seed-percall,
# persistent, greedy; core-a and core-b run only when named). Each step is capped,
# and no cap runs past $BUDGET seconds from the start (570: one device call may
# run 600 s at most); a step with under 10 s left is skipped.
set -uo pipefail
device=${DEVICE:-gpu}
out=${OUT:-/tmp/stablejit-device}
results=${RESULTS:-benchmarks/results}
py=${PYTHON:-python3}
budget=${BUDGET:-570}
site=${SITE:-/tmp/stablejit-site}
mkdir -p "$out" "$results"
machine_path=${PYTHONPATH-}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="$out/log-$device.txt"
: >"$log"

# Result files are named <case>-<backend>; JAX calls a CUDA backend "gpu" and a TPU "tpu".
pack() {
    tar czf "$out/results-$device.tar.gz" "$log" $(ls "$results"/*-"$device".* 2>/dev/null)
}

step() {  # step NAME SECONDS COMMAND...: run capped (and within the budget), log, pack
    local name=$1 cap=$2 left=$((budget - SECONDS)) rc
    shift 2
    [[ -z ${STEPS-} || ,$STEPS, == *,"$name",* ]] || return 0
    if ((left < 10)); then
        echo "== $name: skipped, ${left} s of the ${budget} s budget left" | tee -a "$log"
        return
    fi
    ((cap > left)) && cap=$left
    echo "== $name: start at ${SECONDS} s, cap ${cap} s" >>"$log"
    timeout "$cap" "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc at ${SECONDS} s" | tee -a "$log"
    pack
    # A TPU refuses a program that starts just after one was killed holding it.
    if [[ $device == tpu && $rc == 124 ]]; then sleep 5; fi
}

# The install step (a TPU machine's, or INSTALL=1): a child bash, so that its
# cap holds; PYTHONPATH names its folders beforehand (absent ones are harmless).
# The wheels go in with pip, which writes each one's dist-info RECORD: that is
# how stablejit tells an installed library (its functions keyed by identity,
# never walked) wherever it lies, as for the machine's own JAX outside any
# site-packages (see stablejit/_fingerprint/library.py).
export SJ_PY=$py SJ_SITE=$site SJ_WHEELS=${WHEELS:-$PWD/.whl-tpu} SJ_INDEX=${INDEX:-file:///opt/pypi/simple}
install_deps() {
    local pip=(env PIP_CONFIG_FILE=/dev/null "$SJ_PY" -m pip install --isolated -q
        --disable-pip-version-check --no-compile --no-cache-dir)
    local group dir w
    # The carried wheels, all at once, else one by one (a bad one stops only itself).
    for group in core plot; do
        dir=$SJ_WHEELS
        [[ $group == plot ]] && dir=$SJ_WHEELS/plot
        ls "$dir"/*.whl >/dev/null 2>&1 || { echo "install: no wheels in $dir"; continue; }
        "${pip[@]}" --no-index --no-deps --upgrade --target "$SJ_SITE/$group/site-packages" "$dir"/*.whl && continue
        echo "install: the $group wheels together failed; one by one"
        for w in "$dir"/*.whl; do
            "${pip[@]}" --no-index --no-deps --upgrade --target "$SJ_SITE/$group/site-packages" "$w" ||
                echo "install: $(basename "$w") failed"
        done
    done
    # What still does not import comes from the machine's index, each package
    # with its needs in a folder of its own (a package the index lacks stops
    # nothing else); JAX_PLATFORMS=cpu keeps the check off the chip.
    local missing mod
    missing=$(JAX_PLATFORMS=cpu "$SJ_PY" - <<'PY'
import importlib
for m in ("cloudpickle", "xxhash", "optax", "equinox", "matplotlib", "pytest", "hypothesis"):
    try:
        importlib.import_module(m)
    except Exception as e:  # noqa: BLE001 (an ImportError, or a wheel that fails to load)
        print(m)
PY
    )
    for mod in $missing; do
        # A plot wheel that failed to load would hide the index's copy.
        [[ $mod == matplotlib ]] && rm -rf "$SJ_SITE/plot"
        echo "install: $mod from $SJ_INDEX"
        "${pip[@]}" --only-binary=:all: --index-url "$SJ_INDEX" --target "$SJ_SITE/index-$mod/site-packages" "$mod" ||
            echo "install: $mod not installed from $SJ_INDEX"
    done
    JAX_PLATFORMS=cpu "$SJ_PY" - <<'PY'
import importlib
for m in ("jax", "jaxlib", "numpy", "cloudpickle", "xxhash", "optax", "equinox", "matplotlib",
          "pytest", "hypothesis"):
    try:
        mod = importlib.import_module(m)
        print(f"{m:12} {getattr(mod, '__version__', '?'):12} {mod.__file__}")
    except Exception as e:  # noqa: BLE001
        print(f"{m:12} MISSING ({type(e).__name__}: {e})")
from stablejit._fingerprint.code import is_library_file
for m in ("jax", "optax", "equinox"):
    try:
        print(f"stablejit counts {m} as a library:", is_library_file(importlib.import_module(m).__file__))
    except ImportError:
        pass
PY
}
if [[ $device == tpu || ${INSTALL:-0} == 1 ]]; then
    export -f install_deps
    echo "python3: $("$py" -c 'import platform, sys; print(sys.version.split()[0], *platform.libc_ver())'); machine's PYTHONPATH: $machine_path" | tee -a "$log"
    for d in core plot index-cloudpickle index-xxhash index-optax index-equinox \
        index-matplotlib index-pytest index-hypothesis; do
        PYTHONPATH="$PYTHONPATH:$site/$d/site-packages"
    done
    step install 75 bash -c install_deps
fi

# Per-device caps. On a TPU every process spends 10 s or more opening the chip
# (the suite's cases took 40-50 s each), and greedy, last, takes what is left.
# There the core tests go on past a failure: some compare float32 results with
# NumPy's float64 at rtol 1e-7, which the TPU's tanh misses by ~3e-6.
if [[ $device == tpu ]]; then
    caps=(40 80 300 90 120 300) stop_early=()
else
    caps=(40 70 150 60 100 150) stop_early=(-x)
fi

step versions "${caps[0]}" "$py" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
# Behaviour first, on this JAX: timings of wrong results would mean nothing.
step "core tests" "${caps[1]}" "$py" -m pytest -q -p no:cacheprovider "${stop_early[@]}" tests/test_seed.py \
    tests/test_staleness.py tests/test_callables.py tests/test_fastpath.py tests/test_side_channels.py \
    tests/test_fastpath_containers.py
# The whole core suite (all but the fuzzer) on the device, named only (STEPS=install,core-a,
# then STEPS=install,core-b: about 3 and 4 minutes on a TPU v5e, one device call each).
# The files split at test_loops_in_transforms.py; results in $out/core-<half>.xml.
core_half() {  # core_half a|b
    local files
    files=$(ls tests/test_*.py | grep -v test_fuzz | awk -v h="$1" '(h == "a") == ($0 < "tests/test_loops_in")')
    "$SJ_PY" -m pytest -q -p no:cacheprovider -rfE --junitxml="$SJ_OUT/core-$1.xml" $files
}
export -f core_half
export SJ_OUT=$out
for half in a b; do
    [[ ,${STEPS-}, == *,core-$half,* ]] && step "core-$half" 540 bash -c "core_half $half"
done
# Per-call overhead (seed, anchors, optax-step) and the fingerprint's scaling.
step suite "${caps[2]}" "$py" -m benchmarks --device "$device" --rounds 9 --out "$results" \
    --only seed,anchors,optax-step,scaling
# The per-call plot: each round recompiles jax.jit's and equinox's variants on
# every call, which costs more on a GPU, so fewer rounds.
step seed-percall "${caps[3]}" "$py" benchmarks/seed_percall.py --device "$device" --rounds 3 \
    --calls 50 --out "$results"
# First call in a fresh process: a new process per sample.
step persistent "${caps[4]}" "$py" benchmarks/persistent.py --device "$device" \
    --rounds 3 --out "$results"
# The decoder at GPT-2 small's size, last: its compiles are the longest steps.
# stablejit.while_loop against the hand refactoring.
step greedy "${caps[5]}" "$py" benchmarks/greedy.py --device "$device" --size gpt2-small --rounds 3 \
    --out "$results"
ls -l "$out"
