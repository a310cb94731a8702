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
# most 8 files). Steps are capped so that the whole run stays under ~9 minutes.
set -uo pipefail
device=${DEVICE:-gpu}
out=${OUT:-/tmp/stablejit-device}
results=${RESULTS:-benchmarks/results}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
log="$out/log-$device.txt"

{
    "$py" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, jax.devices())'
    # Behaviour first, on this JAX: timings of wrong results would mean nothing.
    timeout 150 "$py" -m pytest -q -p no:cacheprovider -x tests/test_seed.py \
        tests/test_staleness.py tests/test_callables.py tests/test_persistent.py
    echo "== core tests: exit $?"
    # Issue 2 (per-call overhead: seed, anchors, optax-step) and the decoders.
    timeout 300 "$py" -m benchmarks --device "$device" --rounds 9 --out "$results" \
        --only seed,seed-percall,anchors,optax-step,greedy
    echo "== suite: exit $?"
    # Issue 8 (first call in a fresh process), last: it starts a process per sample.
    timeout 200 "$py" benchmarks/persistent.py --device "$device" --rounds 3 --out "$results"
    echo "== persistent: exit $?"
} 2>&1 | tee "$log"

# Result files are named <case>-<backend>, and JAX calls a CUDA backend "gpu".
tar czf "$out/results-$device.tar.gz" "$results"/*-"$device".* "$log"
ls -l "$out"
