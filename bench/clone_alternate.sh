#!/usr/bin/env bash
# First write to cloned blocks vs a normal overwrite through NBD (issue 5),
# alternating the two in one daemon so that drift (page cache, cleaner, load)
# hits both alike: regions A and D (SIZE each) are written sequentially, A
# is cloned to ROUNDS regions B1..Bn with `ftlctl range clone`; then fio
# (--ioengine=nbd, 4 KiB random writes, QD given) runs RUNTIME seconds on B_i
# (first writes: each breaks sharing) and then on D (overwrites of blocks
# nobody shares), for each i. Prints each run and the means. Only measures;
# kills only what it started.
#
#   bench/clone_alternate.sh [--build DIR] [--size MIB] [--rounds N] [--runtime SEC] [--qd N]
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=clone_alternate
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
BUILD="${here}/../build"
SIZE=256
ROUNDS=3
RUNTIME=4
QD=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --runtime) RUNTIME="$2"; shift 2 ;;
    --qd) QD="$2"; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3
DIR="$(mktemp -d "${TMPDIR:-/var/tmp}/ftld-clonealt.XXXXXX")"
PID=""
cleanup() {
  [[ -n "$PID" ]] && { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }
  rm -rf "$DIR"
}
trap cleanup EXIT
port=$(free_port)
backing=$(( SIZE * (ROUNDS + 2) * 4 ))M
D=$(( SIZE * (ROUNDS + 1) ))
"$BUILD/daemon/ftld" --size "$backing" --port "$port" --control "$DIR/c.sock" --log-level warn \
  "$DIR/c.img" 2>"$DIR/c.log" &
PID=$!
wait_port "$port"
uri="nbd://127.0.0.1:$port/"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(load)," \
     "region ${SIZE} MiB, backing $backing, QD $QD, ${RUNTIME}s runs, $(git -C "$here" rev-parse --short HEAD 2>/dev/null)"
for off in 0 "$D"; do
  fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1m --iodepth=8 --offset="${off}M" \
      --size="${SIZE}M" --output=/dev/null
done
for i in $(seq 1 "$ROUNDS"); do
  "$BUILD/tools/ftlctl" --control "$DIR/c.sock" range clone 0 "$(( i * SIZE ))M" "${SIZE}M" >/dev/null
done
run() {  # offset(MiB) label
  fio --name=w --ioengine=nbd --uri="$uri" --rw=randwrite --bs=4k --iodepth="$QD" \
      --offset="$1M" --size="${SIZE}M" --time_based --runtime="$RUNTIME" \
      --output-format=json --output="$DIR/r.json" >/dev/null
  "$PY" - "$DIR/r.json" "$2" <<'PY' | tee -a "$DIR/rows"
import json, sys
d = json.load(open(sys.argv[1]))["jobs"][0]["write"]
print("%-12s %8.0f IOPS %8.1f us" % (sys.argv[2], d["iops"], d["clat_ns"]["mean"] / 1000))
PY
}
for i in $(seq 1 "$ROUNDS"); do
  run $(( i * SIZE )) "clone-first"
  run "$D" "overwrite"
done
"$PY" - "$DIR/rows" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
c = statistics.mean(float(r[1]) for r in rows if r[0] == "clone-first")
o = statistics.mean(float(r[1]) for r in rows if r[0] == "overwrite")
print(f"mean: overwrite {o:.0f} IOPS, first write to cloned blocks {c:.0f} IOPS -> "
      f"{(o - c) / o * 100:+.1f}% slower (goal <= 10%)")
PY
