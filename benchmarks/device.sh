#!/usr/bin/env bash
# The GPU measurements, as one prepared run for a session lent a device machine.
#
#   bash benchmarks/device.sh            # on the device, from the repository root
#   DEVICE=cpu RESULTS=/tmp/r bash benchmarks/device.sh  # the same steps here, to check it
#
# The device's python3 already holds JAX with CUDA wheels and every package the
# cases need (optax, equinox, flax, cloudpickle, xxhash, matplotlib, pytest,
# hypothesis), and nothing can be installed there, so stablejit runs from this
# tree. transformers there is 5.x, without Flax generation: the hf cases are
# left out. The results land in benchmarks/results/ (or $RESULTS) and, packed, in
# $OUT/results-<device>.tar.gz with the log (the device tool brings back at
# most 8 files). The archive is rewritten after every step, so a run cut off by
# the device's time limit still brings back what finished. Each step is capped;
# the caps add up to under 10 minutes, the longest one device call may run.
set -uo pipefail
device=${DEVICE:-gpu}
out=${OUT:-/tmp/stablejit-device}
results=${RESULTS:-benchmarks/results}
py=${PYTHON:-python3}
mkdir -p "$out" "$results"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="$out/log-$device.txt"
: >"$log"

# Result files are named <case>-<backend>, and JAX calls a CUDA backend "gpu".
pack() {
    tar czf "$out/results-$device.tar.gz" "$log" $(ls "$results"/*-"$device".* 2>/dev/null)
}

step() {  # step NAME SECONDS COMMAND...: run capped, log, pack
    local name=$1 cap=$2
    shift 2
    timeout "$cap" "$@" 2>&1 | tee -a "$log"
    echo "== $name: exit ${PIPESTATUS[0]}" | tee -a "$log"
    pack
}

step versions 40 "$py" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
# Behaviour first, on this JAX: timings of wrong results would mean nothing.
step "core tests" 70 "$py" -m pytest -q -p no:cacheprovider -x tests/test_seed.py \
    tests/test_staleness.py tests/test_callables.py tests/test_fastpath.py tests/test_side_channels.py
# Per-call overhead (seed, anchors, optax-step) and the fingerprint's scaling.
step suite 150 "$py" -m benchmarks --device "$device" --rounds 9 --out "$results" \
    --only seed,anchors,optax-step,scaling
# The per-call plot: each round recompiles jax.jit's and equinox's variants on
# every call, which costs more on a GPU, so fewer rounds.
step seed-percall 60 "$py" benchmarks/seed_percall.py --device "$device" --rounds 3 \
    --calls 50 --out "$results"
# First call in a fresh process: a new process per sample.
step persistent 100 "$py" benchmarks/persistent.py --device "$device" --rounds 3 --out "$results"
# The decoder at GPT-2 small's size, last: its compiles are the longest steps.
# stablejit.while_loop against the hand refactoring.
step greedy 150 "$py" benchmarks/greedy.py --device "$device" --size gpt2-small --rounds 3 \
    --out "$results"
ls -l "$out"
