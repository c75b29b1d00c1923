#!/usr/bin/env bash
# Snapshots end to end (issue 4, "Benchmarks"), in one run:
#
#  A. fio (--ioengine=nbd, 1 job) 4 KiB random write and read IOPS at QD 32
#     on ftld with 0 snapshots vs N snapshots present (N created through the
#     control socket with random 4 KiB writes between them), in cycles
#     0 -> N -> (delete all) 0 -> N ..., so drift shows. With N snapshots
#     randwrite runs twice: the 1st run also pays the first write to every
#     block after the snapshots (new VBAs, copied leaves), the 2nd is the
#     steady state. Each row also shows the pool's counters over the run.
#  B. Snapshot create round trip at 1, 4, 8 GiB of written data (--sizes):
#     over the control socket (one persistent connection; includes the
#     durable note), as `ftlctl snapshot create` (includes starting the CLI),
#     and qcow2 internal snapshots `qemu-img snapshot -c` on a qcow2 image
#     holding the same amount of data (includes starting qemu-img).
#
#   bench/snapshot_fio.sh [--build DIR] [--dir DIR] [--size SIZE] [--runtime SEC]
#                         [--snapshots N] [--cycles N] [--sizes "1 4 8"] [--creates N]
#                         [--only A|B] [--quick]
#
# --build: a build tree with daemon/ftld and tools/ftlctl (default build-bench).
# --quick: 256 MiB working set, 3 s runs, 20 snapshots, sizes "1".
# If ftlctl has no `snapshot` command, part A's snapshot rounds and part B's
# ftld side are skipped with a message. Kills only what it started (by PID).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=snapshot_fio
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
BUILD="${here}/../build-bench"
DIR=""
SIZE="1G"        # part A working set
BACKING_A="8G"   # part A backing: room for what the snapshots hold
RUNTIME=10
NSNAP=100
CYCLES=2
SIZES="1 4 8"
CREATES=30
ONLY=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --runtime) RUNTIME="$2"; shift 2 ;;
    --snapshots) NSNAP="$2"; shift 2 ;;
    --cycles) CYCLES="$2"; shift 2 ;;
    --sizes) SIZES="$2"; shift 2 ;;
    --creates) CREATES="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --quick) SIZE="256M"; BACKING_A="2G"; RUNTIME=3; NSNAP=20; SIZES="1"; CREATES=10; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
FTLD="$BUILD/daemon/ftld"
FTLCTL="$BUILD/tools/ftlctl"
PY=/usr/bin/python3
CTL="$here/snapshot_ctl.py"
for tool in fio nbdinfo qemu-img qemu-io "$PY"; do
  command -v "$tool" >/dev/null || { echo "snapshot_fio: $tool not installed" >&2; exit 2; }
done
[[ -x "$FTLD" && -x "$FTLCTL" ]] || { echo "snapshot_fio: no ftld/ftlctl under $BUILD" >&2; exit 2; }
HAVE_SNAP=1
if ! "$FTLCTL" --help 2>&1 | grep -q "snapshot create"; then
  HAVE_SNAP=0
  echo "# ftlctl has no 'snapshot create': the snapshot parts are SKIPPED"
fi

DIR="${DIR:-$(mktemp -d "${TMPDIR:-/var/tmp}/ftld-snapbench.XXXXXX")}"
mkdir -p "$DIR"
PIDS=()
stop_pid() {  # stop one daemon we started, by PID, and wait for it
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  local keep=()
  for p in "${PIDS[@]}"; do [[ "$p" != "$1" ]] && keep+=("$p"); done
  PIDS=("${keep[@]+"${keep[@]}"}")
}
cleanup() {
  stop_all
  rm -f "$DIR"/*.img "$DIR"/*.qcow2 "$DIR"/*.sock
}
trap cleanup EXIT

# fio JSON -> "iops p50_us p99_us"
summarize() {
  "$PY" - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["jobs"][0]
side = d["write"] if d["write"]["io_bytes"] else d["read"]
pc = side["clat_ns"].get("percentile", {})
print("%.0f %.1f %.1f" % (side["iops"], pc.get("50.000000", 0) / 1000, pc.get("99.000000", 0) / 1000))
PY
}
jget() { "$PY" -c "import json,sys; d=json.loads(sys.argv[1]); print(d.get('$2', 0))" "$1"; }

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(load), fio $(fio --version)," \
     "$(qemu-img --version | head -1)"
echo "# directory: $DIR ($(df -h --output=fstype,size,avail "$DIR" | tail -1 | xargs))"
echo "# ftld: $FTLD; source checkout at $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')"

# ------------------------------------------------------------------ part A
part_a() {
  echo
  echo "## A. fio 4 KiB random QD32 with 0 vs $NSNAP snapshots (working set $SIZE," \
       "backing $BACKING_A, ${RUNTIME}s per run)"
  local port sock pid uri
  port=$(free_port); sock="$DIR/a.sock"
  "$FTLD" --size "$BACKING_A" --port "$port" --control "$sock" --log-level warn \
    "$DIR/a.img" 2>"$DIR/a.log" &
  pid=$!; PIDS+=("$pid")
  wait_port "$port"
  uri="nbd://127.0.0.1:$port/"
  fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1m --iodepth=8 --size="$SIZE" \
      --output=/dev/null
  stats() { "$FTLCTL" --control "$sock" --json stats; }
  # Pool counters between two `stats` replies: WA, relocated, segments
  # cleaned, map memory.
  delta() {
    "$PY" - "$1" "$2" <<'PY'
import json, sys
a, b = (json.loads(x)["pool"] for x in sys.argv[1:3])
d = lambda k: b[k] - a[k]
user = d("user_write_bytes")
wa = d("media_write_bytes") / user if user else 0
print("WA %.2f, relocated %.0f MiB, %d segments cleaned, map %.1f MiB, %d checkpoints" % (
    wa, d("gc_relocated_bytes") / 2**20, d("gc_segments_cleaned"), b["map_memory_bytes"] / 2**20,
    d("checkpoint_count")))
PY
  }
  run() {  # label rw -> prints a row, appends to $DIR/a.rows
    local out="$DIR/fio-a.json" s0 s1
    s0=$(stats)
    fio --name=a --ioengine=nbd --uri="$uri" --rw="$2" --bs=4k --iodepth=32 --numjobs=1 \
        --size="$SIZE" --time_based --runtime="$RUNTIME" --ramp_time=1 \
        --output-format=json --output="$out" >/dev/null
    s1=$(stats)
    local r; r=$(summarize "$out")
    printf "%-34s %-10s %10s %9s %9s   load %s; %s\n" "$1" "$2" $r "$(load)" "$(delta "$s0" "$s1")"
    echo "$1 $2 $r" >>"$DIR/a.rows"
  }
  : >"$DIR/a.rows"
  printf "%-34s %-10s %10s %9s %9s\n" "state" "workload" "IOPS" "p50 us" "p99 us"
  for c in $(seq 1 "$CYCLES"); do
    run "0 snapshots (cycle $c)" randwrite
    run "0 snapshots (cycle $c)" randread
    if [[ $HAVE_SNAP == 0 ]]; then
      echo "(snapshot rounds skipped: ftlctl has no 'snapshot create')"
      continue
    fi
    # N snapshots, 1000 random 4 KiB writes before each.
    local r
    r=$("$PY" "$CTL" create --control "$sock" --prefix "c${c}s" --count "$NSNAP" \
        --uri "$uri" --writes 1000)
    echo "# created $NSNAP snapshots (1000 random writes before each): round trip" \
         "p50 $(jget "$r" p50) us, p99 $(jget "$r" p99) us, failed $(jget "$r" failed)"
    run "$NSNAP snapshots, 1st (cycle $c)" randwrite
    run "$NSNAP snapshots, 2nd (cycle $c)" randwrite
    run "$NSNAP snapshots (cycle $c)" randread
    r=$("$PY" "$CTL" delete --control "$sock" --prefix "c${c}s" --count "$NSNAP")
    echo "# deleted them: round trip p50 $(jget "$r" p50) us, p99 $(jget "$r" p99) us," \
         "failed $(jget "$r" failed)"
    "$FTLCTL" --control "$sock" gc >/dev/null
  done
  if [[ $HAVE_SNAP == 1 ]]; then
    "$PY" - "$DIR/a.rows" "$NSNAP" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
n = sys.argv[2]
for rw, which in (("randwrite", "1st"), ("randwrite", "2nd"), ("randread", "")):
    base = [float(r[-3]) for r in rows if r[0] == "0" and r[-4] == rw]
    snap = [float(r[-3]) for r in rows
            if r[0] == n and r[-4] == rw and (not which or which in r)]
    b, s = statistics.mean(base), statistics.mean(snap)
    slower = (b - s) / b * 100
    label = rw + (f" ({which} run after creating them)" if which else "")
    print(f"{label:<42} 0 snapshots {b:9.0f} IOPS (mean of {len(base)}), {n} snapshots "
          f"{s:9.0f} -> {slower:+.1f}% slower (goal <= 3%: {'met' if slower <= 3 else 'MISSED'})")
PY
    echo "# ftld stats after part A:"
    "$FTLCTL" --control "$sock" stats 2>/dev/null | \
      grep -E "write amplification|map memory|snapshots|gc segments cleaned" || true
  fi
  stop_pid "$pid"
  rm -f "$DIR/a.img"
}

# ------------------------------------------------------------------ part B
part_b() {
  echo
  echo "## B. snapshot create round trip vs qcow2 internal snapshots, sizes: $SIZES GiB," \
       "$CREATES creates each"
  local maxg=0 g
  for g in $SIZES; do (( g > maxg )) && maxg=$g; done
  local port sock pid uri
  printf "%-8s %-44s %9s %9s %9s %s\n" "data" "operation" "p50 us" "p99 us" "max us" "note"
  row() { printf "%-8s %-44s %9.0f %9.0f %9.0f %s\n" "$1" "$2" "$(jget "$3" p50)" \
            "$(jget "$3" p99)" "$(jget "$3" max)" "n=$(jget "$3" n) failed=$(jget "$3" failed) $4"; }
  if [[ $HAVE_SNAP == 1 ]]; then
    port=$(free_port); sock="$DIR/b.sock"
    "$FTLD" --size "$(( maxg * 3 / 2 + 2 ))G" --port "$port" --control "$sock" \
      --log-level warn "$DIR/b.img" 2>"$DIR/b.log" &
    pid=$!; PIDS+=("$pid")
    wait_port "$port"
    uri="nbd://127.0.0.1:$port/"
  fi
  local done_g=0 r
  for g in $SIZES; do
    # ftld: fill up to g GiB (sequential 1 MiB), then the creates.
    if [[ $HAVE_SNAP == 1 ]]; then
      fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1m --iodepth=8 \
          --offset="${done_g}G" --size="$(( g - done_g ))G" --output=/dev/null
      # Let the fill's writeback finish first: otherwise the first creates'
      # syncs flush gigabytes of the fill and the size compares dirty pages.
      sync
      r=$("$PY" "$CTL" create --control "$sock" --prefix "g${g}s" --count "$CREATES" \
          --uri "$uri" --writes 16)
      row "${g} GiB" "ftld: control socket round trip (create)" "$r" \
          "16 random 4 KiB writes between; load $(load)"
      r=$("$PY" "$CTL" cli --count "$CREATES" -- "$FTLCTL" --control "$sock" snapshot create \
          "g${g}c{i}")
      row "${g} GiB" "ftld: ftlctl snapshot create (CLI process)" "$r" "load $(load)"
      r=$("$PY" "$CTL" request --control "$sock" --count 5 '{"cmd":"snapshot","action":"list"}')
      row "${g} GiB" "ftld: control socket round trip (list)" "$r" \
          "$(( 2 * CREATES )) snapshots"
      r=$("$PY" "$CTL" delete --control "$sock" --prefix "g${g}s" --count "$CREATES")
      row "${g} GiB" "ftld: control socket round trip (delete)" "$r" \
          "the ones with writes between, while the CLI ones exist"
      r=$("$PY" "$CTL" cli --count "$CREATES" -- "$FTLCTL" --control "$sock" snapshot delete \
          "g${g}c{i}")
      row "${g} GiB" "ftld: ftlctl snapshot delete (CLI process)" "$r" \
          "created back to back: they share the root"
      done_g=$g
    else
      echo "${g} GiB   ftld side SKIPPED (ftlctl has no 'snapshot create')"
    fi
    # qcow2: an image holding g GiB (written in 1 GiB requests), then the
    # snapshots; image closed between (qemu-img needs it unused).
    local img="$DIR/q${g}.qcow2" cmds=() k
    qemu-img create -q -f qcow2 "$img" "${g}G"
    for k in $(seq 0 $(( g - 1 ))); do cmds+=(-c "write -P $(( (k % 250) + 1 )) ${k}G 1G"); done
    local t0 t1
    t0=$(date +%s.%N)
    qemu-io -f qcow2 "${cmds[@]}" "$img" >/dev/null
    t1=$(date +%s.%N)
    r=$("$PY" "$CTL" cli --count "$CREATES" -- qemu-img snapshot -c "snap{i}" "$img")
    row "${g} GiB" "qcow2: qemu-img snapshot -c (CLI process)" "$r" \
        "image $(du -h "$img" | cut -f1), written in $(printf '%.0f' "$(echo "$t1 - $t0" | bc)") s; load $(load)"
    r=$("$PY" "$CTL" cli --count 5 -- qemu-img info "$img")
    row "${g} GiB" "qcow2: qemu-img info (CLI start-up, no snapshot)" "$r" ""
    r=$("$PY" "$CTL" cli --count "$CREATES" -- qemu-img snapshot -d "snap{i}" "$img")
    row "${g} GiB" "qcow2: qemu-img snapshot -d (CLI process)" "$r" ""
    rm -f "$img"
  done
  if [[ $HAVE_SNAP == 1 ]]; then
    r=$("$PY" "$CTL" cli --count 10 -- "$FTLCTL" --control "$sock" status)
    row "-" "ftld: ftlctl status (CLI start-up, no snapshot)" "$r" ""
    stop_pid "$pid"
    rm -f "$DIR/b.img"
  fi
}

[[ -z "$ONLY" || "$ONLY" == A ]] && part_a
[[ -z "$ONLY" || "$ONLY" == B ]] && part_b
echo
echo "# done, load $(load)"
