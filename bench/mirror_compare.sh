#!/usr/bin/env bash
# A mirror of two backing files against a single backing file (issue 22):
# two ftld daemons, fio (--ioengine=nbd, 1 job) against each, alternating
# which goes first in every round. Then scrub: its throughput on an idle
# mirror, and foreground 4 KiB random IOPS on the mirror with a scrub
# running at its default rate (64 MiB/s) against none, alternating.
#
#   bench/mirror_compare.sh [--ftld PATH] [--dir DIR] [--size SIZE] [--backing SIZE]
#                           [--runtime SEC] [--rounds N] [--quick]
#
# Workloads: 4 KiB randwrite and randread at QD 32, 128 KiB sequential
# write and read at QD 32. Every fio run starts after a `sync`, so that
# neither side pays for the other's write-back. --dir /dev/shm puts the
# backing files in memory: what the mirror costs in CPU alone. Prints per-round IOPS and the median ratio
# mirror/single. mdadm --level=1 cannot run here (no md kernel module), so
# there is no md peer. Never timed assertions: this only prints. Kills only
# what it started.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=mirror_compare
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
FTLD="${here}/../build/daemon/ftld"
DIR=""
SIZE="1G"
BACKING=""     # each backing file; default 4G, or 3x --size when that is given
RUNTIME=15
ROUNDS=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ftld) FTLD="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --backing) BACKING="$2"; shift 2 ;;
    --runtime) RUNTIME="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --quick) SIZE="256M"; BACKING="1G"; RUNTIME=3; ROUNDS=1; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$BACKING" ]]; then
  if [[ "$SIZE" == "1G" ]]; then BACKING="4G"; else
    BACKING="$(( $(numfmt --from=iec "$SIZE") * 3 / 1048576 ))M"; fi
fi
for tool in fio nbdinfo python3; do
  command -v "$tool" >/dev/null || { echo "mirror_compare: $tool not installed" >&2; exit 2; }
done
[[ -x "$FTLD" ]] || { echo "mirror_compare: no ftld at $FTLD (use --ftld)" >&2; exit 2; }
# ftlctl from the same build (build/tools/), else beside the ftld given.
FTLCTL="$(dirname "$FTLD")/../tools/ftlctl"
[[ -x "$FTLCTL" ]] || FTLCTL="$(dirname "$FTLD")/ftlctl"
[[ -x "$FTLCTL" ]] || { echo "mirror_compare: no ftlctl beside $FTLD" >&2; exit 2; }

DIR="${DIR:-$(mktemp -d "${TMPDIR:-/var/tmp}/ftld-mirror-bench.XXXXXX")}"
mkdir -p "$DIR"
PIDS=()
cleanup() {
  stop_all
  rm -f "$DIR"/single.img "$DIR"/m0.img "$DIR"/m1.img "$DIR"/*.sock
}
trap cleanup EXIT

echo "# directory: $DIR ($(df -h --output=fstype,size "$DIR" | tail -1 | xargs))"
echo "# working set $SIZE, ${RUNTIME}s per workload, $ROUNDS round(s), fio $(fio --version), load $(load)"
echo "# mdadm --level=1: not run (this kernel has no md module)"

P_ONE=$(free_port)
"$FTLD" --size "$BACKING" --port "$P_ONE" --control "$DIR/single.sock" --log-level warn \
  "$DIR/single.img" 2>"$DIR/single.log" &
PIDS+=($!)
P_MIR=$(free_port)
"$FTLD" --size "$BACKING" --port "$P_MIR" --control "$DIR/mirror.sock" --log-level warn \
  --mirror "$DIR/m0.img" "$DIR/m1.img" 2>"$DIR/mirror.log" &
PIDS+=($!)
wait_port "$P_ONE"; wait_port "$P_MIR"
declare -A URI=([single]="nbd://127.0.0.1:$P_ONE/" [mirror]="nbd://127.0.0.1:$P_MIR/")

for s in single mirror; do
  fio --name=fill --ioengine=nbd --uri="${URI[$s]}" --rw=write --bs=1m --iodepth=8 \
      --size="$SIZE" --output=/dev/null
done

# fio JSON -> IOPS
iops() {
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["jobs"][0]
side = d["write"] if d["write"]["io_bytes"] else d["read"]
print("%.0f" % side["iops"])
PY
}
run_fio() {  # server rw bs qd -> IOPS
  local out="$DIR/fio-$1-$2-$3-$4.json"
  # Start each run without the previous run's dirty pages still being
  # written back (which would slow whichever ran second).
  sync
  fio --name="$1" --ioengine=nbd --uri="${URI[$1]}" --rw="$2" --bs="$3" --iodepth="$4" \
      --numjobs=1 --size="$SIZE" --time_based --runtime="$RUNTIME" --ramp_time=1 \
      --output-format=json --output="$out" >/dev/null
  iops "$out"
}

WORKLOADS=("randwrite 4k 32" "randread 4k 32" "write 128k 32" "read 128k 32")
ROWS=""
for r in $(seq 1 "$ROUNDS"); do
  order=(single mirror)
  (( r % 2 == 0 )) && order=(mirror single)
  for w in "${WORKLOADS[@]}"; do
    read -r rw bs qd <<<"$w"
    declare -A got=()
    for s in "${order[@]}"; do got[$s]=$(run_fio "$s" "$rw" "$bs" "$qd"); done
    line="$r $rw $bs $qd ${got[single]} ${got[mirror]} $(load)"
    echo "round $line"
    ROWS+="$line"$'\n'
  done
done

# Scrub throughput on the idle mirror (no rate limit).
"$FTLCTL" --control "$DIR/mirror.sock" --json scrub start --rate 0 --wait >"$DIR/scrub-idle.json"
SCRUB_IDLE=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%d %.3f" % (d["scanned_bytes"], d["elapsed_s"]))' "$DIR/scrub-idle.json")
echo "scrub idle: $SCRUB_IDLE (bytes, seconds)"

# Foreground IOPS with a scrub at the default rate against none.
SROWS=""
for r in $(seq 1 "$ROUNDS"); do
  for w in "randread 4k 32" "randwrite 4k 32"; do
    read -r rw bs qd <<<"$w"
    modes=(none scrub)
    (( r % 2 == 0 )) && modes=(scrub none)
    declare -A got=()
    for m in "${modes[@]}"; do
      if [[ $m == scrub ]]; then "$FTLCTL" --control "$DIR/mirror.sock" --json scrub start >/dev/null; fi
      got[$m]=$(run_fio mirror "$rw" "$bs" "$qd")
      if [[ $m == scrub ]]; then
        st=$("$FTLCTL" --control "$DIR/mirror.sock" --json scrub stop | python3 -c 'import json,sys; d=json.load(sys.stdin); print("%s %d" % (d["state"], d["scanned_bytes"]))')
        got[scrubbed]="$st"
      fi
    done
    line="$r $rw $bs $qd ${got[none]} ${got[scrub]} ${got[scrubbed]} $(load)"
    echo "scrub round $line"
    SROWS+="$line"$'\n'
  done
done

python3 - <<EOF
import statistics
rows = [l.split() for l in """$ROWS""".strip().splitlines()]
print(f"{'workload':<20}{'single IOPS':>14}{'mirror IOPS':>14}{'mirror/single':>15}")
for w in ["randwrite 4k 32", "randread 4k 32", "write 128k 32", "read 128k 32"]:
    rw, bs, qd = w.split()
    sel = [r for r in rows if r[1:4] == [rw, bs, qd]]
    one = [float(r[4]) for r in sel]; mir = [float(r[5]) for r in sel]
    ratios = [m / o for m, o in zip(mir, one)]
    print(f"{rw + ' ' + bs + ' QD' + qd:<20}{statistics.median(one):>14.0f}{statistics.median(mir):>14.0f}"
          f"{statistics.median(ratios):>14.2f}x  (rounds: {', '.join('%.2f' % x for x in ratios)})")
b, s = "$SCRUB_IDLE".split()
print(f"scrub on the idle mirror: {int(b) / 2**20 / float(s):.0f} MiB/s ({int(b) >> 20} MiB in {float(s):.2f} s)")
srows = [l.split() for l in """$SROWS""".strip().splitlines()]
for w in ["randread 4k 32", "randwrite 4k 32"]:
    rw, bs, qd = w.split()
    sel = [r for r in srows if r[1:4] == [rw, bs, qd]]
    ratios = [float(r[5]) / float(r[4]) for r in sel]
    print(f"{rw + ' ' + bs + ' QD' + qd:<20} with scrub (64 MiB/s) / without: {statistics.median(ratios):.3f}"
          f"  (rounds: {', '.join('%.3f' % x for x in ratios)}; scrubbed MiB per run: "
          f"{', '.join(str(int(r[7]) >> 20) for r in sel)})")
EOF
