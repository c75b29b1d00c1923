#!/usr/bin/env bash
# Flush-heavy writes (fio --fsync=1: a FLUSH after every write) against two
# ftld builds and `nbdkit file`, alternating A B K rounds on backing files in
# one directory (same filesystem). Measures what an acknowledged FLUSH costs:
# since issue 19 a flush after writes also writes and syncs a durability
# marker (docs/decisions.md).
#
#   bench/flush_ab.sh --a OLD_FTLD --b NEW_FTLD [--dir DIR] [--rounds N]
#                     [--runtime SEC] [--bs 4k] [--prealloc] [--jobs N]
#
# --prealloc: every backing file fully allocated first (B with ftld
# --preallocate, A's and nbdkit's written with zeros by dd), as a user
# would for a database; without it all three are sparse files, and ftld's
# first pass over its log makes each synced write allocate (docs/decisions.md,
# "Preallocated backing files").
#
# Prints IOPS and mean / p99 completion latency per server and round, then
# medians and the ratios B/A and B/nbdkit. QD 1, 256 MiB working set; one
# job, or --jobs N (N connections, each writing and flushing at QD 1: their
# flushes overlap; IOPS and latency are of all jobs together).
# Only prints (never a timed assertion). Kills only what it started.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=flush_ab
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
A="" B="" DIR="" ROUNDS=3 RUNTIME=10 BS=4k SIZE=256M PREALLOC=0 JOBS=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --a) A="$2"; shift 2 ;;
    --b) B="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --runtime) RUNTIME="$2"; shift 2 ;;
    --bs) BS="$2"; shift 2 ;;
    --prealloc) PREALLOC=1; shift ;;
    --jobs) JOBS="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$A" && -x "$B" ]] || { echo "flush_ab: give --a and --b ftld binaries" >&2; exit 2; }
for tool in fio nbdkit nbdinfo; do
  command -v "$tool" >/dev/null || { echo "flush_ab: $tool not installed" >&2; exit 2; }
done
DIR="${DIR:-$(mktemp -d "${TMPDIR:-/var/tmp}/ftld-flush.XXXXXX")}"
mkdir -p "$DIR"
PIDS=()
cleanup() { stop_all; rm -f "$DIR"/a.img "$DIR"/b.img "$DIR"/k.raw "$DIR"/*.sock; }
trap cleanup EXIT

echo "# directory: $DIR ($(df -h --output=fstype,size "$DIR" | tail -1 | xargs)), bs $BS, QD1 x $JOBS jobs, fsync=1, ${RUNTIME}s x $ROUNDS rounds, $([[ $PREALLOC == 1 ]] && echo preallocated || echo sparse) files"
P_A=$(free_port); P_B=$(free_port); P_K=$(free_port)
A_ARGS=(--size 1G) B_ARGS=(--size 1G)
if [[ $PREALLOC == 1 ]]; then
  dd if=/dev/zero of="$DIR/a.img" bs=1M count=1024 status=none
  A_ARGS=(--format --no-discard)
  B_ARGS=(--size 1G --preallocate)
fi
"$A" "${A_ARGS[@]}" --port "$P_A" --control "$DIR/a.sock" --log-level warn "$DIR/a.img" 2>"$DIR/a.log" &
PIDS+=($!)
"$B" "${B_ARGS[@]}" --port "$P_B" --control "$DIR/b.sock" --log-level warn "$DIR/b.img" 2>"$DIR/b.log" &
PIDS+=($!)
if [[ $PREALLOC == 1 ]]; then
  dd if=/dev/zero of="$DIR/k.raw" bs=1M count="${SIZE%M}" status=none
else
  truncate -s "$SIZE" "$DIR/k.raw"
fi
nbdkit -f -p "$P_K" -i 127.0.0.1 file "$DIR/k.raw" &
PIDS+=($!)
wait_port "$P_A"; wait_port "$P_B"; wait_port "$P_K"
declare -A URI=([A]="nbd://127.0.0.1:$P_A/" [B]="nbd://127.0.0.1:$P_B/" [nbdkit]="nbd://127.0.0.1:$P_K/")

rows=""
for r in $(seq 1 "$ROUNDS"); do
  for s in A B nbdkit; do
    out="$DIR/fio-$s-$r.json"
    fio --name="$s" --ioengine=nbd --uri="${URI[$s]}" --rw=randwrite --bs="$BS" --iodepth=1 \
        --fsync=1 --size="$SIZE" --numjobs="$JOBS" --group_reporting --time_based --runtime="$RUNTIME" \
        --output-format=json --output="$out" >/dev/null
    line=$(/usr/bin/python3 - "$out" <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))["jobs"][0]["write"]
lat = w["clat_ns"]
print("%.0f %.1f %.1f" % (w["iops"], lat["mean"] / 1000, lat["percentile"]["99.000000"] / 1000))
PY
)
    echo "round $r $s: IOPS, mean us, p99 us: $line"
    rows+="$s $line"$'\n'
  done
done
/usr/bin/python3 - <<EOF
import statistics
rows = """$rows"""
res = {}
for l in rows.strip().splitlines():
    s, iops, mean, p99 = l.split()
    res.setdefault(s, []).append((float(iops), float(mean), float(p99)))
med = {s: tuple(statistics.median(v[i] for v in vals) for i in range(3)) for s, vals in res.items()}
for s in ["A", "B", "nbdkit"]:
    print(f"median {s:<7} {med[s][0]:>8.0f} IOPS {med[s][1]:>8.1f} us mean {med[s][2]:>8.1f} us p99")
print(f"B/A IOPS {med['B'][0] / med['A'][0]:.2f}x; B/nbdkit IOPS {med['B'][0] / med['nbdkit'][0]:.2f}x; "
      f"latency nbdkit/B {med['nbdkit'][1] / med['B'][1]:.2f}x (>1: B faster)")
EOF
