#!/usr/bin/env bash
# Range clones end to end (issue 5, "Benchmarks"): fio (--ioengine=nbd,
# 1 job, QD 32 and QD 1, 4 KiB) through ftld on a backing file, in one run:
#
#  1. first write to cloned blocks vs a normal overwrite: region A (SIZE) is
#     written sequentially; fio overwrites every block of A once in random
#     order (normal overwrite: each block's VBA is reused); then A is cloned
#     to region B with one `ftlctl range clone` and fio writes every block of
#     B once in random order (each write breaks sharing: new VBA, tree
#     update). Then at QD 1, in the order overwrite / first / first /
#     overwrite: overwrites of D (never cloned), first writes to C and E,
#     two more clones of A.
#  2. regular I/O with clones present vs without: random 4 KiB reads of A
#     after it was cloned 16 times, alternating with reads of a region D of
#     the same volume written the same way and never cloned (3 rounds).
#
#   bench/clone_fio.sh [--build DIR] [--dir DIR] [--size SIZE]
#
# --build: a build tree with nbd/ftld and tools/ftlctl (default build).
# Kills only what it started (by PID).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUILD="${here}/../build"
DIR=""
SIZE_MB=512
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --size) SIZE_MB="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
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

start() {
  rm -f "$DIR/backing.img"
  "$BUILD/nbd/ftld" --size $((SIZE_MB * 40))M --port "$PORT" --control "$SOCK" \
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
start
A=0; B=$((SIZE_MB * 2)); C=$((SIZE_MB * 4))
seqfill $A
over32=$(run randwrite 32 $A)
ctl range clone 0 "${B}M" "${SIZE_MB}M"
first32=$(run randwrite 32 $B)
# QD1 in the order overwrite, first, first, overwrite (ABBA): on this VM a
# later phase writes into never-touched page-cache memory and runs slower,
# whichever kind it is. Overwrites go to D (written the same way, shared
# with nobody); first writes to two fresh clones of A (C and E).
D=$((SIZE_MB * 20)); E=$((SIZE_MB * 6))
seqfill $D
ctl range clone 0 "${C}M" "${SIZE_MB}M"
ctl range clone 0 "${E}M" "${SIZE_MB}M"
o1=$(run randwrite 1 $D)
f1=$(run randwrite 1 $C)
f2=$(run randwrite 1 $E)
o2=$(run randwrite 1 $D)
over1=$(( (o1 + o2) / 2 )); first1=$(( (f1 + f2) / 2 ))
stop
echo "first write to cloned blocks vs overwrite (IOPS, every block once, random order):"
echo "  QD32: overwrite $over32, first write to clone $first32 ($(ratio "$over32" "$first32") slower)"
echo "  QD1:  overwrite $over1 ($o1, $o2), first write to clone $first1 ($f1, $f2) ($(ratio "$over1" "$first1") slower)"

start
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
