#!/usr/bin/env bash
# Run timecal.py's cases on a TPU machine with no network (the device machine
# of benchmarks/README.md): install the project's dependencies from the
# machine's own package index into /tmp/site (once per machine), then run the
# cases matching each argument, one process (the chip opened once), stopping
# cleanly before LIMIT seconds. Results: $OUT/chip.jsonl, $OUT/hlo.tar and
# $OUT/log.txt. Usage: [SET=unseen3] benchmarks/calibration/timecal_chip.sh LIMIT
# SUBSTRING... (SET: a blind set of benchmarks/calibration/sets/, timecal.py --set)
set -u
limit=$1; shift
out=${OUT:-/tmp/timecal-out}; mkdir -p "$out" /tmp/hlo
if [ ! -d /tmp/site/flax ]; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --only-binary=:all: \
    --index-url file:///opt/pypi/simple --target /tmp/site \
    flax optax jaxtyping beartype rich orbax-checkpoint > "$out/pip.txt" 2>&1
fi
export PYTHONPATH="$PYTHONPATH:/tmp/site:$PWD/${SRC:-src}:$PWD:$PWD/.chipdeps"
export PYTHONUNBUFFERED=1
python3 -c 'import jax; print(jax.__version__, jax.devices())' >> "$out/log.txt" 2>&1
began=$(date +%s)
for pattern in "$@"; do
  left=$(( limit - ($(date +%s) - began) ))
  [ "$left" -le 20 ] && { echo "no time left for $pattern" >> "$out/log.txt"; break; }
  timeout "$left" python3 benchmarks/calibration/timecal.py chip "$out/chip.jsonl" /tmp/hlo \
    ${SET:+--set "$SET"} --cases "$pattern" >> "$out/log.txt" 2>&1
  echo "[$pattern] exit $? after $(( $(date +%s) - began )) s" >> "$out/log.txt"
done
tar -cf "$out/hlo.tar" -C /tmp hlo
