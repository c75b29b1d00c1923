#!/usr/bin/env bash
# Regular I/O with N snapshots present vs none (issue 4), as a paired A/B:
# two daemons built the same way, "snap" and "plain", each on its own sparse
# backing file in one directory. Both get a sequential fill of the working
# set, then N rounds of W random 4 KiB writes; "snap" takes a snapshot after
# each round (through the control socket), "plain" does not. Then fio
# (--ioengine=nbd, 1 job, 4 KiB, QD32) runs alternately on plain and snap,
# R times each for randwrite and then randread, so load drift hits both
# alike. Prints every run, the means and snap's slowdown. Only measures.
#
#   bench/snapshot_pair.sh [--build DIR] [--dir DIR] [--size SIZE] [--backing SIZE]
#                          [--snapshots N] [--writes W] [--runtime SEC] [--repeats R]
#
# The backing is large by default (16G for 1G of working set) so that the
# cleaner's extra work for the data the snapshots hold (which is the space
# cost of keeping snapshots, not mapping overhead) stays small; pass a smaller
# --backing to see that cost too. Kills only what it started (by PID).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=snapshot_pair
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
BUILD="${here}/../build"
DIR=""
SIZE="1G"
BACKING="16G"
NSNAP=100
WRITES=1000
RUNTIME=10
REPEATS=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --backing) BACKING="$2"; shift 2 ;;
    --snapshots) NSNAP="$2"; shift 2 ;;
    --writes) WRITES="$2"; shift 2 ;;
    --runtime) RUNTIME="$2"; shift 2 ;;
    --repeats) REPEATS="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
FTLD="$BUILD/daemon/ftld"
FTLCTL="$BUILD/tools/ftlctl"
PY=/usr/bin/python3
CTL="$here/snapshot_ctl.py"
for tool in fio nbdinfo "$PY"; do
  command -v "$tool" >/dev/null || { echo "snapshot_pair: $tool not installed" >&2; exit 2; }
done
[[ -x "$FTLD" && -x "$FTLCTL" ]] || { echo "snapshot_pair: no ftld/ftlctl under $BUILD" >&2; exit 2; }

DIR="${DIR:-$(mktemp -d "${TMPDIR:-/var/tmp}/ftld-snappair.XXXXXX")}"
mkdir -p "$DIR"
PIDS=()
cleanup() {
  stop_all
  rm -f "$DIR"/*.img "$DIR"/*.sock "$DIR"/*.json
}
trap cleanup EXIT

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(load), fio $(fio --version)"
echo "# $FTLD ($(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')), dir $DIR," \
     "working set $SIZE, backing $BACKING, $NSNAP snapshots x $WRITES writes, ${RUNTIME}s runs"

declare -A PORT SOCK PID
for side in plain snap; do
  PORT[$side]=$(free_port)
  SOCK[$side]="$DIR/$side.sock"
  "$FTLD" --size "$BACKING" --port "${PORT[$side]}" --control "${SOCK[$side]}" --log-level warn \
    "$DIR/$side.img" 2>"$DIR/$side.log" &
  PID[$side]=$!; PIDS+=("${PID[$side]}")
done
for side in plain snap; do
  wait_port "${PORT[$side]}"
  fio --name=fill --ioengine=nbd --uri="nbd://127.0.0.1:${PORT[$side]}/" --rw=write --bs=1m \
      --iodepth=8 --size="$SIZE" --output=/dev/null
done
# The same random writes on both (same seed); snapshots only on "snap".
"$PY" "$CTL" create --control "${SOCK[snap]}" --prefix s --count "$NSNAP" \
  --uri "nbd://127.0.0.1:${PORT[snap]}/" --writes "$WRITES" >"$DIR/create.json"
"$PY" "$CTL" create --control "${SOCK[plain]}" --prefix s --count "$NSNAP" \
  --uri "nbd://127.0.0.1:${PORT[plain]}/" --writes "$WRITES" --no-snapshot >/dev/null
echo "# snapshot create round trip: $(cat "$DIR/create.json")"

cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
rows="$DIR/rows"
: >"$rows"
printf "%-6s %-10s %4s %10s %12s %10s\n" side workload run IOPS "CPU us/IO" load
for rw in randwrite randread; do
  for i in $(seq 1 "$REPEATS"); do
    for side in plain snap; do
      c0=$(cpu "${PID[$side]}")
      fio --name=p --ioengine=nbd --uri="nbd://127.0.0.1:${PORT[$side]}/" --rw="$rw" --bs=4k \
          --iodepth=32 --size="$SIZE" --time_based --runtime="$RUNTIME" --ramp_time=1 \
          --output-format=json --output="$DIR/run.json" >/dev/null
      c1=$(cpu "${PID[$side]}")
      read -r iops ios < <("$PY" - "$DIR/run.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["jobs"][0]
s = d["write"] if d["write"]["io_bytes"] else d["read"]
print("%.0f %d" % (s["iops"], s["total_ios"]))
PY
)
      tick=$(getconf CLK_TCK)
      cpu_us=$("$PY" -c "print('%.1f' % (($c1 - $c0) / $tick * 1e6 / max(1, $ios)))")
      printf "%-6s %-10s %4d %10s %12s %10s\n" "$side" "$rw" "$i" "$iops" "$cpu_us" "$(load)"
      echo "$side $rw $i $iops $cpu_us" >>"$rows"
    done
  done
done
"$PY" - "$rows" "$NSNAP" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
for rw in ("randwrite", "randread"):
    get = lambda side, col: [float(r[col]) for r in rows if r[0] == side and r[1] == rw]
    p, s = statistics.mean(get("plain", 3)), statistics.mean(get("snap", 3))
    pc, sc = statistics.mean(get("plain", 4)), statistics.mean(get("snap", 4))
    first = [float(r[3]) for r in rows if r[0] == "snap" and r[1] == rw and r[2] == "1"][0]
    later = [float(r[3]) for r in rows if r[0] == "snap" and r[1] == rw and r[2] != "1"]
    pl = [float(r[3]) for r in rows if r[0] == "plain" and r[1] == rw and r[2] != "1"]
    print(f"{rw:<10} plain {p:8.0f} IOPS, {sys.argv[2]} snapshots {s:8.0f} IOPS: "
          f"{(p - s) / p * 100:+.1f}% slower (runs 2+: "
          f"{(statistics.mean(pl) - statistics.mean(later)) / statistics.mean(pl) * 100 if later else 0:+.1f}%); "
          f"CPU per IO {pc:.1f} vs {sc:.1f} us")
PY
for side in plain snap; do
  echo "# $side: $("$FTLCTL" --control "${SOCK[$side]}" stats 2>/dev/null | \
    grep -E "write amplification|map memory|gc segments cleaned" | xargs)"
done
