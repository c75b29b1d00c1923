#!/usr/bin/env bash
# Range clones end to end (issue 5, "Benchmarks"): fio (--ioengine=nbd,
# 1 job, QD 32 and QD 1, 4 KiB) through ftld on a backing file, in one run:
#
#  1. first write to cloned blocks vs a normal overwrite. Regions A and D
#     (SIZE each) are written sequentially; A is cloned to B and C with
#     `ftlctl range clone`. Then, at QD 32 and again (after re-cloning A to
#     B and C) at QD 1, in the order overwrite / first / first / overwrite
#     (ABBA): fio overwrites every block of D once in random order (shared
#     with nobody: each block keeps its VBA), writes every block of B once
#     (each write breaks sharing: new VBA, tree update), the same for C, and
#     overwrites D again. The backing file is written full of zeros (and
#     synced) before ftld formats it, so no phase pays for never-touched
#     page-cache pages (on this VM a buffered write into a fresh page costs
#     ~12 us; whichever phase came later used to run slower);
#     --no-pretouch leaves it sparse.
#  2. regular I/O with clones present vs without: random 4 KiB reads of A
#     after it was cloned 16 times, alternating with reads of a region D of
#     the same volume written the same way and never cloned (3 rounds).
#
#   bench/clone_fio.sh [--build DIR] [--dir DIR] [--size SIZE] [--no-pretouch]
#
# --build: a build tree with nbd/ftld and tools/ftlctl (default build).
# Kills only what it started (by PID).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUILD="${here}/../build"
DIR=""
SIZE_MB=512
PRETOUCH=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --size) SIZE_MB="$2"; shift 2 ;;
    --no-pretouch) PRETOUCH=0; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v fio >/dev/null || { echo "clone_fio: fio not installed" >&2; exit 2; }
DIR="${DIR:-$(mktemp -d /tmp/clone-fio.XXXXXX)}"
PORT=$((20000 + RANDOM % 20000))
SOCK="$DIR/ctl.sock"
PID=""
cleanup() { [[ -n "$PID" ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT

# start BACKING_MB [pretouch]: a fresh daemon on a new backing file.
start() {
  rm -f "$DIR/backing.img"
  local args=(--size "$1M")
  if [[ "${2:-0}" == 1 ]]; then
    dd if=/dev/zero of="$DIR/backing.img" bs=1M count="$1" status=none
    sync "$DIR/backing.img"
    args=(--format)
  fi
  "$BUILD/nbd/ftld" "${args[@]}" --port "$PORT" --control "$SOCK" \
      "$DIR/backing.img" >"$DIR/ftld.log" 2>&1 &
  PID=$!
  for _ in $(seq 100); do [[ -S "$SOCK" ]] && return; sleep 0.1; done
  echo "ftld did not start" >&2; cat "$DIR/ftld.log" >&2; exit 1
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""; }
ctl() { "$BUILD/tools/ftlctl" --control "$SOCK" "$@" >/dev/null; }
# fio RW QD OFFSET_MB: every 4 KiB block of [OFFSET, OFFSET+SIZE) once, random order
run() {
  fio --name=t --ioengine=nbd --uri="nbd://127.0.0.1:$PORT/" --rw="$1" --bs=4k \
      --iodepth="$2" --offset="$3M" --size="${SIZE_MB}M" --randrepeat=0 \
      --output-format=json 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):])["jobs"][0]; print(int(j["read"]["iops"] + j["write"]["iops"]))'
}
seqfill() {
  fio --name=f --ioengine=nbd --uri="nbd://127.0.0.1:$PORT/" --rw=write --bs=1M \
      --iodepth=8 --offset="$1M" --size="${SIZE_MB}M" >/dev/null 2>&1
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f%%", (a / b - 1) * 100 }'; }

echo "clone_fio: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), region ${SIZE_MB} MiB"
# Regions A, B, C, D at 0, 2, 4, 8 x SIZE of a 16 x SIZE backing file: the
# phases write 10 x SIZE in all, so the cleaner never has to run.
start $((SIZE_MB * 16)) "$PRETOUCH"
A=0; B=$((SIZE_MB * 2)); C=$((SIZE_MB * 4)); D=$((SIZE_MB * 8))
seqfill $A
seqfill $D
# abba QD: overwrite D, first writes to fresh clones B and C, overwrite D.
abba() {
  ctl range clone 0 "${B}M" "${SIZE_MB}M"
  ctl range clone 0 "${C}M" "${SIZE_MB}M"
  o1=$(run randwrite "$1" $D)
  f1=$(run randwrite "$1" $B)
  f2=$(run randwrite "$1" $C)
  o2=$(run randwrite "$1" $D)
  over=$(( (o1 + o2) / 2 )); first=$(( (f1 + f2) / 2 ))
  echo "  QD$1: overwrite $over ($o1, $o2), first write to clone $first ($f1, $f2) ($(ratio "$over" "$first") slower)"
}
echo "first write to cloned blocks vs overwrite (IOPS, every block once, random order; backing pretouched: $PRETOUCH):"
abba 32
abba 1
"$BUILD/tools/ftlctl" --control "$SOCK" --json stats | /usr/bin/python3 -c 'import json,sys
s=json.load(sys.stdin); s=s.get("pool", s)
print("  segments cleaned during the run: %s, write amplification %s" % (s.get("gc_segments_cleaned"), s.get("write_amplification")))' || true
stop

start $((SIZE_MB * 40))
# D: written and fragmented like A, never cloned; reads of A (cloned 16
# times) and of D alternate, 3 rounds, so drift hits both alike.
D=$((SIZE_MB * 20))
seqfill $A
seqfill $D
run randwrite 32 $A >/dev/null   # fragment the map like a used volume
run randwrite 32 $D >/dev/null
for i in $(seq 16); do ctl range clone 0 "$(( (i + 1) * SIZE_MB ))M" "${SIZE_MB}M"; done
plain_all=() cloned_all=()
for r in 1 2 3; do
  cloned_all+=("$(run randread 32 $A)")
  plain_all+=("$(run randread 32 $D)")
done
stop
mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.0f", s / NR }'; }
plain=$(mean "${plain_all[@]}"); cloned=$(mean "${cloned_all[@]}")
echo "random 4 KiB reads at QD32, region never cloned (${plain_all[*]}) vs region cloned 16 times (${cloned_all[*]}):"
echo "  means $plain vs $cloned IOPS ($(ratio "$plain" "$cloned") slower)"
