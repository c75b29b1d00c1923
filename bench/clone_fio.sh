#!/usr/bin/env bash
# Range clones end to end (issue 5, "Benchmarks"): fio (--ioengine=nbd,
# 1 job, 4 KiB) through ftld, in one run:
#
#  1. first write to cloned blocks vs a normal overwrite. Regions A, B, C, D
#     (SIZE each, at 0, 2, 4, 8 x SIZE) of one volume; A and D are written
#     sequentially. Each round re-clones A to B and C with `ftlctl range
#     clone` and then runs, in the order overwrite / first / first /
#     overwrite (ABBA, so linear drift hits both sides alike): fio
#     overwrites every block of D once in random order (shared with nobody:
#     each block keeps its VBA), writes every block of B once (each write
#     breaks sharing: new VBA, tree update), the same for C, and overwrites
#     D again. ROUNDS rounds at QD 32 over SIZE and ROUNDS at QD 1 over the
#     first QD1_SIZE of each region, alternating (QD32 round 1, QD1 round 1,
#     QD32 round 2, ...). Every phase prints fio's IOPS and the daemon's
#     user and system CPU time per op (/proc/PID/stat utime and stime
#     around the fio run); then per QD the medians over rounds of overwrite
#     vs first write (each round's value is the mean of its two phases):
#     IOPS ("x% slower" = overwrite/first - 1), user CPU per op and total
#     (user + system) CPU per op ("+y%" = first/overwrite - 1), with each
#     round's own figure. The backing is sized so that every phase writes
#     fresh log space and the cleaner never runs (log budget: 1.05 x the
#     sequential fills, 1.2 x the QD32 phases, 2.1 x the QD1 phases - a QD1
#     write is a record of its own, header block plus data block - plus 160
#     MiB; the backing holds 1.1 x that plus 320 MiB, as the cleaner starts
#     while some segments are still free); the run prints the log actually
#     written and the segments cleaned (expected: 0).
#     Why the backing matters: on this VM the first write into never-touched
#     (or recently freed) guest memory costs ~10 us per 4 KiB page. By
#     default ftld's format punches holes over the whole data area of a
#     backing file, so every log write lands in a fresh page-cache page and
#     the daemon's system CPU per op swung 2-5x between phases of one run
#     (user CPU per op stayed stable). So the backing file is written full
#     of zeros first and ftld runs with --no-discard, which keeps every
#     page allocated. --backing tmpfs (default when /dev/shm and
#     MemAvailable have room for it; with the default SIZE and ROUNDS about
#     12 GiB): the file is in /dev/shm, so no disk writeback runs under the
#     phases. --backing file: the file is in DIR (synced after the zeros).
#     --no-pretouch leaves the backing sparse and lets ftld discard (how
#     earlier runs of this script measured).
#  2. regular I/O with clones present vs without: random 4 KiB reads at
#     QD32 of A after it was cloned 16 times, alternating with reads of a
#     region D of the same volume written the same way and never cloned (3
#     rounds). Same backing kind as part 1, always sparse (only reads are
#     measured); backing 30 x SIZE (tmpfs) or 40 x SIZE (file).
#
#   bench/clone_fio.sh [--build DIR] [--dir DIR] [--size MB] [--rounds N]
#                      [--qd1-size MB] [--backing file|tmpfs] [--no-pretouch]
#
# --build: a build tree with daemon/ftld and tools/ftlctl (default build).
# --dir: where the control socket, logs and (--backing file) the backing
#   file go (default a new temporary directory, removed at exit; of a given
#   DIR only the files this script made are removed).
# --size: region size in MiB (default 512). --rounds: ABBA rounds per QD
#   (default 3). --qd1-size: QD1 region size in MiB (default SIZE/4).
# --backing: default tmpfs (falls back to file, and says so, if /dev/shm
#   or MemAvailable is too small). The header line says which was used.
# ftld listens on 127.0.0.1 (a free port). Kills only what it started (by
# PID); removes its /dev/shm files at exit.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUILD="${here}/../build"
DIR=""
SIZE_MB=512
ROUNDS=3
QD1_MB=""
BACKING=""
PRETOUCH=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --size) SIZE_MB="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --qd1-size) QD1_MB="$2"; shift 2 ;;
    --backing) BACKING="$2"; shift 2 ;;
    --no-pretouch) PRETOUCH=0; shift ;;
    -h|--help) sed -n '2,59p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
die() { echo "clone_fio: $*" >&2; exit 2; }
isint() { [[ "$1" =~ ^[0-9]+$ ]] && (( $1 >= 1 )); }
isint "$SIZE_MB" || die "--size wants a positive number of MiB"
isint "$ROUNDS" || die "--rounds wants a positive number"
QD1_MB="${QD1_MB:-$(( SIZE_MB / 4 > 0 ? SIZE_MB / 4 : 1 ))}"
if ! isint "$QD1_MB" || (( QD1_MB > SIZE_MB )); then die "--qd1-size wants 1..SIZE MiB"; fi
command -v fio >/dev/null || die "fio not installed"
[[ -x "$BUILD/daemon/ftld" && -x "$BUILD/tools/ftlctl" ]] || die "no ftld/ftlctl in $BUILD"

# Log budget of part 1 in MiB (see the header), then the backing: the data
# area starts after two checkpoint slots (~1/32 of the media), and the
# volume (0.8 of the segments) must reach D + SIZE = 9 x SIZE.
LOG_MB=$(( 2 * SIZE_MB * 105 / 100 + ROUNDS * 4 * SIZE_MB * 120 / 100 \
           + ROUNDS * 4 * QD1_MB * 210 / 100 + 160 ))
# Plus 10% and 320 MiB: the cleaner starts while a few segments plus a
# slack (1 per 128 not holding live data, at most 64) are still free.
BACK1_MB=$(( LOG_MB * 33 * 110 / 3200 + 320 ))
(( BACK1_MB >= 12 * SIZE_MB + 64 )) || BACK1_MB=$(( 12 * SIZE_MB + 64 ))

BACKING_NOTE=""
can_shm() { [[ -d /dev/shm && -w /dev/shm ]]; }
mem_ok() {  # MiB needed: MemAvailable and /dev/shm free space, 1 GiB spare
  local avail shm
  avail=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
  shm=$(df -Pm /dev/shm | awk 'NR == 2 { print $4 }')
  (( avail >= $1 + 1024 && shm >= $1 )) && return 0
  BACKING_NOTE="tmpfs needs $1 MiB, MemAvailable $avail MiB, /dev/shm free $shm MiB"
  return 1
}
case "$BACKING" in
  "")
    if can_shm && mem_ok "$BACK1_MB"; then BACKING=tmpfs; else
      BACKING="file"
      if [[ -n "$BACKING_NOTE" ]]; then BACKING_NOTE="fallback to file: $BACKING_NOTE"; fi
    fi ;;
  tmpfs)
    can_shm || die "--backing tmpfs needs a writable /dev/shm"
    mem_ok "$BACK1_MB" || die "$BACKING_NOTE (try a smaller --size / --rounds, or --backing file)" ;;
  file) ;;
  *) die "--backing wants file or tmpfs" ;;
esac

OWN_DIR=0
if [[ -z "$DIR" ]]; then DIR="$(mktemp -d /tmp/clone-fio.XXXXXX)"; OWN_DIR=1; fi
mkdir -p "$DIR"
SOCK="$DIR/ctl.sock"
PID=""    # the running ftld
SHM=""    # its backing file in /dev/shm (tmpfs)
PORT=""
PHASES="$DIR/phases.tsv"

# stop: SIGTERM to our ftld (it checkpoints and exits), bounded wait, then
# SIGKILL; then remove the shm file.
stop() {
  if [[ -n "$PID" ]]; then
    kill "$PID" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
    PID=""
  fi
  if [[ -n "$SHM" ]]; then rm -f "$SHM"; SHM=""; fi
}
cleanup() {
  stop
  if (( OWN_DIR )); then rm -rf "$DIR"
  else rm -f "$DIR/backing.img" "$SOCK" "$DIR/ftld.log" "$DIR/fio.json" "$PHASES"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start BACKING_MB FILL: a fresh daemon on a new backing of BACKING_MB MiB;
# FILL=1 writes it full of zeros first and starts ftld with --no-discard
# (see the header).
start() {
  local mb="$1" fill="$2" dev
  local extra=()
  if (( fill )); then extra=(--no-discard); fi
  if [[ "$BACKING" == tmpfs ]]; then
    SHM="$(mktemp /dev/shm/clone-fio.XXXXXX)"
    if (( fill )); then dd if=/dev/zero of="$SHM" bs=1M count="$mb" status=none
    else truncate -s "${mb}M" "$SHM"; fi
    dev="$SHM"
  else
    dev="$DIR/backing.img"
    rm -f "$dev"
    if (( fill )); then
      dd if=/dev/zero of="$dev" bs=1M count="$mb" status=none
      sync "$dev"
    else truncate -s "${mb}M" "$dev"; fi
  fi
  rm -f "$SOCK"
  "$BUILD/daemon/ftld" --format "${extra[@]}" --bind 127.0.0.1 --port 0 --control "$SOCK" \
      "$dev" >"$DIR/ftld.log" 2>&1 &
  PID=$!
  for _ in $(seq 100); do
    [[ -S "$SOCK" ]] && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.1
  done
  PORT=$("$BUILD/tools/ftlctl" --control "$SOCK" --json status 2>/dev/null |
         /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["listen"]["tcp"].rsplit(":", 1)[1])' 2>/dev/null) ||
    { echo "clone_fio: ftld did not start" >&2; cat "$DIR/ftld.log" >&2; exit 1; }
}
ctl() { "$BUILD/tools/ftlctl" --control "$SOCK" "$@" >/dev/null; }
# The daemon's utime and stime in clock ticks (/proc/PID/stat fields 14 and
# 15; counted after the ")" that ends the command name).
cpu_ticks() {
  local line rest
  read -r line <"/proc/$PID/stat"
  rest="${line##*) }"
  # shellcheck disable=SC2086
  set -- $rest
  echo "${12} ${13}"
}
TCK=$(getconf CLK_TCK)
# fio RW QD OFFSET_MB SIZE_MB: every 4 KiB block of [OFFSET, OFFSET+SIZE)
# once, random order. Prints "IOPS IOS".
fio_run() {
  fio --name=t --ioengine=nbd --uri="nbd://127.0.0.1:$PORT/" --rw="$1" --bs=4k \
      --iodepth="$2" --offset="$3M" --size="$4M" --randrepeat=0 \
      --output-format=json >"$DIR/fio.json" 2>/dev/null ||
    { echo "clone_fio: fio $1 failed" >&2; cat "$DIR/fio.json" >&2; exit 1; }
  /usr/bin/python3 -c 'import json,sys; t=open(sys.argv[1]).read(); j=json.loads(t[t.index("{"):])["jobs"][0]
print(int(j["read"]["iops"] + j["write"]["iops"]), j["read"]["total_ios"] + j["write"]["total_ios"])' "$DIR/fio.json"
}
run() { fio_run "$@" | cut -d' ' -f1; }
# phase QD ROUND KIND LABEL OFFSET_MB SIZE_MB: a randwrite phase, recorded
# in PHASES and printed.
phase() {
  local c0 c1 res u0 s0 u1 s1 iops ios
  c0=$(cpu_ticks)
  res=$(fio_run randwrite "$1" "$5" "$6")
  c1=$(cpu_ticks)
  read -r u0 s0 <<<"$c0"; read -r u1 s1 <<<"$c1"; read -r iops ios <<<"$res"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$iops" "$ios" \
      $(( u1 - u0 )) $(( s1 - s0 )) >>"$PHASES"
  awk -v q="$1" -v r="$2" -v l="$4" -v i="$iops" -v n="$ios" -v u=$(( u1 - u0 )) \
      -v s=$(( s1 - s0 )) -v t="$TCK" 'BEGIN {
        printf "  QD%-2s round %s %-13s %7d IOPS, daemon CPU us/op: user %5.2f sys %5.2f total %5.2f\n",
          q, r, l, i, u * 1e6 / t / n, s * 1e6 / t / n, (u + s) * 1e6 / t / n }'
}
seqfill() {
  fio --name=f --ioengine=nbd --uri="nbd://127.0.0.1:$PORT/" --rw=write --bs=1M \
      --iodepth=8 --offset="$1M" --size="${SIZE_MB}M" >/dev/null 2>&1 ||
    { echo "clone_fio: sequential fill failed" >&2; exit 1; }
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f%%", (a / b - 1) * 100 }'; }
# log_stats BUDGET_MB: log written, free segments, segments cleaned.
log_stats() {
  "$BUILD/tools/ftlctl" --control "$SOCK" --json stats | /usr/bin/python3 -c 'import json,sys
s=json.load(sys.stdin); s=s.get("pool", s); b=sys.argv[1]
print("  log written %.0f MiB%s, segments free %s of %s, segments cleaned during the run: %s, write amplification %s" % (
    s.get("media_write_bytes", 0) / 2**20, " (budget %s MiB)" % b if b else "",
    s.get("segments_free"), s.get("segments_total"), s.get("gc_segments_cleaned"),
    s.get("write_amplification")))' "${1:-}" || true
}

if [[ "$BACKING" == tmpfs ]]; then
  bdesc="tmpfs (a file in /dev/shm, $( ((PRETOUCH)) && echo "written full of zeros, ftld --no-discard" || echo "sparse, ftld discards"))"
else
  bdesc="file in $DIR ($( ((PRETOUCH)) && echo "written full of zeros and synced, ftld --no-discard" || echo "sparse, ftld discards"))"
fi
echo "clone_fio: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), region ${SIZE_MB} MiB, QD1 region ${QD1_MB} MiB, ${ROUNDS} rounds"
echo "  backing: $bdesc${BACKING_NOTE:+; $BACKING_NOTE}"

# Part 1. Regions A, B, C, D at 0, 2, 4, 8 x SIZE.
start "$BACK1_MB" "$PRETOUCH"
A=0; B=$((SIZE_MB * 2)); C=$((SIZE_MB * 4)); D=$((SIZE_MB * 8))
seqfill $A
seqfill $D
: >"$PHASES"
# abba QD ROUND REGION_MB: re-clone A to B and C, then overwrite D, first
# writes to B and C, overwrite D, each over the first REGION_MB.
abba() {
  ctl range clone 0 "${B}M" "${SIZE_MB}M"
  ctl range clone 0 "${C}M" "${SIZE_MB}M"
  phase "$1" "$2" over "overwrite D" $D "$3"
  phase "$1" "$2" first "first write B" $B "$3"
  phase "$1" "$2" first "first write C" $C "$3"
  phase "$1" "$2" over "overwrite D" $D "$3"
}
echo "first write to cloned blocks vs overwrite (every block once, random order; backing ${BACK1_MB} MiB, ${BACKING}):"
for r in $(seq "$ROUNDS"); do
  abba 32 "$r" "$SIZE_MB"
  abba 1 "$r" "$QD1_MB"
done
/usr/bin/python3 - "$PHASES" "$TCK" <<'EOF'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
tck = float(sys.argv[2])
med = statistics.median
pct = lambda a, b: "%+.1f%%" % ((a / b - 1) * 100)
for qd in sorted({r[0] for r in rows}, key=int, reverse=True):
    per = {}  # round -> kind -> [sum of IOPS, phases, ops, user ticks, system ticks]
    for q, rnd, kind, iops, ios, u, s in rows:
        if q == qd:
            a = per.setdefault(int(rnd), {}).setdefault(kind, [0, 0, 0, 0, 0])
            for i, v in enumerate((int(iops), 1, int(ios), int(u), int(s))):
                a[i] += v
    rounds = [per[k] for k in sorted(per)]
    kinds = ("over", "first")
    iops = {k: [r[k][0] / r[k][1] for r in rounds] for k in kinds}
    user = {k: [r[k][3] * 1e6 / tck / r[k][2] for r in rounds] for k in kinds}
    tot = {k: [(r[k][3] + r[k][4]) * 1e6 / tck / r[k][2] for r in rounds] for k in kinds}
    oi, fi = med(iops["over"]), med(iops["first"])
    ou, fu = med(user["over"]), med(user["first"])
    ot, ft = med(tot["over"]), med(tot["first"])
    each = lambda d, a, b: " ".join(pct(x, y) for x, y in zip(d[a], d[b]))
    print("  QD%s, medians of %d rounds: overwrite %.0f vs first write %.0f IOPS: %.1f%% slower (rounds %s)"
          % (qd, len(rounds), oi, fi, (oi / fi - 1) * 100, each(iops, "over", "first")))
    print("    daemon CPU us/op, overwrite -> first write: user %.2f -> %.2f (%s; rounds %s),"
          % (ou, fu, pct(fu, ou), each(user, "first", "over")))
    print("    total %.2f -> %.2f (%s; rounds %s)"
          % (ot, ft, pct(ft, ot), each(tot, "first", "over")))
EOF
log_stats "$LOG_MB"
stop

# Part 2. D: written and fragmented like A, never cloned; reads of A (cloned
# 16 times) and of D alternate, 3 rounds, so drift hits both alike.
if [[ "$BACKING" == tmpfs ]]; then start $((SIZE_MB * 30)) 0; else start $((SIZE_MB * 40)) 0; fi
D=$((SIZE_MB * 20))
seqfill $A
seqfill $D
run randwrite 32 $A "$SIZE_MB" >/dev/null   # fragment the map like a used volume
run randwrite 32 $D "$SIZE_MB" >/dev/null
for i in $(seq 16); do ctl range clone 0 "$(( (i + 1) * SIZE_MB ))M" "${SIZE_MB}M"; done
plain_all=() cloned_all=()
for _ in 1 2 3; do
  cloned_all+=("$(run randread 32 $A "$SIZE_MB")")
  plain_all+=("$(run randread 32 $D "$SIZE_MB")")
done
mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.0f", s / NR }'; }
plain=$(mean "${plain_all[@]}"); cloned=$(mean "${cloned_all[@]}")
echo "random 4 KiB reads at QD32, region never cloned (${plain_all[*]}) vs region cloned 16 times (${cloned_all[*]}):"
echo "  means $plain vs $cloned IOPS ($(ratio "$plain" "$cloned") slower)"
log_stats
stop
