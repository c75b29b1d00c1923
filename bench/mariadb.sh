#!/usr/bin/env bash
# MariaDB on ftld against MariaDB on `nbdkit file` (issue 25): the whole
# stack, as a user would build it. Three stacks, each an NBD server ->
# nbdfuse -> loop device (direct I/O, 4 KiB sectors) -> ext4 -> MariaDB
# (O_DIRECT, flush at every commit, 128M buffer pool) -> sysbench:
#   ftld-dw0    ftld --preallocate --direct-io writes (the README's database
#               settings; --ftld-flags replaces the second part), innodb_doublewrite=0
#   ftld-dw1    the same, innodb_doublewrite=1
#   nbdkit-dw1  nbdkit file on a fully written file of the same size, doublewrite on
#   ftldb-dw0   with --ftld-b: a second ftld build (or the same with other
#               flags, --ftld-b-flags), doublewrite off: an A/B of ftld itself
#   nbdkit-dw0  with --nbdkit-dw0: nbdkit file with doublewrite off (unsafe:
#               a plain file can tear a page), the control that shows what
#               turning doublewrite off buys on this machine without ftld
# All three are set up first (tables prepared, then synced); then each
# round runs sysbench oltp_write_only and oltp_read_write on each stack in
# turn, one run at a time, the order of the stacks rotating from round to
# round; after each run the stack's dirty pages are written back before
# the next run starts (drain).
#
#   flock /work/bench.lock bench/mariadb.sh [--ftld build/daemon/ftld]
#       [--ftlctl build/tools/ftlctl] [--dir DIR] [--rounds 3] [--time 30]
#       [--tables 8] [--table-size 100000] [--threads 4] [--size 3G] [--quick]
#       [--ftld-flags "..."] [--ftld-b PATH] [--ftld-b-flags "..."] [--nbdkit-dw0]
#
# --size: each export's size (ftld --size; nbdkit's file the same).
# --quick: 2 x 20000 rows, 10 s runs, 1 round. Prints per run: TPS, p95
# latency, bytes the loop device wrote (/sys/block/loopN/stat) and per
# transaction, ftld's user and media bytes (`ftlctl stats`) and media/user,
# the CPU time of the NBD server and of mariadbd per transaction;
# then medians per stack and workload and the ratios of the issue's goals
# (ftld-dw0 TPS >= 1.2x nbdkit-dw1 and >= 1.1x ftld-dw1; media/user <= 1.10
# on oltp_write_only). Only prints (no timed assertion). Needs root
# (losetup, mount); stops only what it started.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
BENCH_NAME=mariadb
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
FTLD="$root/build/daemon/ftld" FTLCTL="$root/build/tools/ftlctl" DIR=""
ROUNDS=3 TIME=30 TABLES=8 TABLE_SIZE=100000 THREADS=4 SIZE=3G
FTLD_FLAGS="--direct-io writes" FTLD_B="" FTLD_B_FLAGS="" NBDKIT_DW0=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ftld) FTLD=$2; shift 2 ;;
    --ftlctl) FTLCTL=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --time) TIME=$2; shift 2 ;;
    --tables) TABLES=$2; shift 2 ;;
    --table-size) TABLE_SIZE=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --ftld-flags) FTLD_FLAGS=$2; shift 2 ;;
    --ftld-b) FTLD_B=$2; shift 2 ;;
    --ftld-b-flags) FTLD_B_FLAGS=$2; shift 2 ;;
    --nbdkit-dw0) NBDKIT_DW0=1; shift ;;
    --quick) TABLES=2 TABLE_SIZE=20000 TIME=10 ROUNDS=1; shift ;;
    -h|--help) sed -n '2,33p' "$0"; exit 0 ;;
    *) echo "mariadb.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$FTLD" && -x "$FTLCTL" ]] || { echo "mariadb.sh: build ftld and ftlctl first (or give --ftld/--ftlctl)" >&2; exit 2; }
for tool in nbdkit nbdinfo nbdfuse losetup mkfs.ext4 mariadbd mariadb-install-db mariadb sysbench fusermount3; do
  command -v "$tool" >/dev/null || { echo "mariadb.sh: $tool not installed (tools/packages.txt)" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "mariadb.sh: needs root (losetup, mount)" >&2; exit 2; }
DIR="${DIR:-$(mktemp -d "${TMPDIR:-/var/tmp}/ftld-mariadb.XXXXXX")}"
mkdir -p "$DIR"
STACKS=(ftld-dw0 ftld-dw1 nbdkit-dw1)
if [[ -n "$FTLD_B" ]]; then
  [[ -x "$FTLD_B" ]] || { echo "mariadb.sh: --ftld-b $FTLD_B is not executable" >&2; exit 2; }
  STACKS+=(ftldb-dw0)
fi
if [[ $NBDKIT_DW0 == 1 ]]; then STACKS+=(nbdkit-dw0); fi
declare -A SERVER_PID FUSE_PID LOOP MYSQLD_PID PORT
RESULTS="$DIR/results.tsv"
: > "$RESULTS"

# True while stack $1's loop device is attached to its nbdfuse file.
loop_is_ours() {
  local backing
  backing=$(cat "/sys/block/${LOOP[$1]#/dev/}/loop/backing_file" 2>/dev/null) || return 1
  [[ "$backing" == "$(realpath -m "$DIR/$1/fuse/disk")" ]]
}

teardown() {
  local s=$1
  if [[ -n "${MYSQLD_PID[$s]:-}" ]]; then
    kill "${MYSQLD_PID[$s]}" 2>/dev/null || true
    wait "${MYSQLD_PID[$s]}" 2>/dev/null || true
    unset "MYSQLD_PID[$s]"
  fi
  if mountpoint -q "$DIR/$s/mnt" 2>/dev/null; then umount "$DIR/$s/mnt" || umount -l "$DIR/$s/mnt"; fi
  if [[ -n "${LOOP[$s]:-}" ]]; then
    # Only while the device is still this stack's (docs/decisions.md,
    # "A loop device is detached only while it is still ours").
    if loop_is_ours "$s"; then losetup -d "${LOOP[$s]}" 2>/dev/null || true; fi
    for _ in $(seq 1 300); do loop_is_ours "$s" || break; sleep 0.1; done
    unset "LOOP[$s]"
  fi
  if grep -q " $DIR/$s/fuse " /proc/mounts; then fusermount3 -u "$DIR/$s/fuse" || fusermount3 -uz "$DIR/$s/fuse"; fi
  if [[ -n "${FUSE_PID[$s]:-}" ]]; then wait "${FUSE_PID[$s]}" 2>/dev/null || true; unset "FUSE_PID[$s]"; fi
  if [[ -n "${SERVER_PID[$s]:-}" ]]; then
    kill "${SERVER_PID[$s]}" 2>/dev/null || true
    wait "${SERVER_PID[$s]}" 2>/dev/null || true
    unset "SERVER_PID[$s]"
  fi
}
cleanup() {
  for s in "${STACKS[@]}"; do teardown "$s"; done
  rm -f "$DIR"/*/backing.img
}
trap cleanup EXIT

client() { mariadb --no-defaults -uroot --socket="$DIR/$1/mysqld.sock" -N -B "${@:2}"; }
sb() {
  local s=$1; shift
  sysbench --db-driver=mysql --mysql-socket="$DIR/$s/mysqld.sock" --mysql-user=root \
    --mysql-db=sbtest --tables="$TABLES" --table-size="$TABLE_SIZE" --threads="$THREADS" "$@"
}

setup() {
  local s=$1 kind=${1%%-*} dw=${1##*-dw}
  mkdir -p "$DIR/$s/fuse" "$DIR/$s/mnt"
  PORT[$s]=$(free_port)
  if [[ $kind == ftld* ]]; then
    local bin=$FTLD flags=$FTLD_FLAGS
    if [[ $kind == ftldb ]]; then bin=$FTLD_B flags=$FTLD_B_FLAGS; fi
    # shellcheck disable=SC2086  # the flags are words
    "$bin" --size "$SIZE" --preallocate --port "${PORT[$s]}" --control "$DIR/$s/ctl.sock" \
      --log-level warn $flags "$DIR/$s/backing.img" 2>"$DIR/$s/server.log" &
  else
    # The same size as ftld's export, every block written (as --preallocate).
    local bytes
    bytes=$(nbdinfo --size "nbd://127.0.0.1:${PORT[ftld-dw0]}/")
    dd if=/dev/zero of="$DIR/$s/backing.img" bs=1M count=$((bytes >> 20)) status=none
    nbdkit -f -p "${PORT[$s]}" -i 127.0.0.1 file "$DIR/$s/backing.img" 2>"$DIR/$s/server.log" &
  fi
  SERVER_PID[$s]=$!
  # ftld writes zeros over its whole backing first (--preallocate): wait
  # for it (bounded) before wait_port's 20 s start.
  for _ in $(seq 1 3000); do
    nbdinfo --size "nbd://127.0.0.1:${PORT[$s]}/" >/dev/null 2>&1 && break
    kill -0 "${SERVER_PID[$s]}" 2>/dev/null || { echo "mariadb.sh: $s server exited: $(tail -3 "$DIR/$s/server.log")" >&2; exit 1; }
    sleep 0.1
  done
  wait_port "${PORT[$s]}"
  nbdfuse -P "$DIR/$s/nbdfuse.pid" "$DIR/$s/fuse/disk" "nbd://127.0.0.1:${PORT[$s]}/" 2>"$DIR/$s/nbdfuse.log" &
  FUSE_PID[$s]=$!
  for _ in $(seq 1 300); do [[ -s "$DIR/$s/nbdfuse.pid" ]] && break; sleep 0.05; done
  LOOP[$s]=$(losetup --direct-io=on --sector-size 4096 --find --show "$DIR/$s/fuse/disk")
  mkfs.ext4 -q -E lazy_itable_init=0,lazy_journal_init=0 "${LOOP[$s]}"
  mount "${LOOP[$s]}" "$DIR/$s/mnt"
  local opts=(--innodb-doublewrite="$dw" --innodb-flush-method=O_DIRECT
              --innodb-flush-log-at-trx-commit=1 --innodb-buffer-pool-size=128M --skip-log-bin)
  mariadb-install-db --no-defaults --datadir="$DIR/$s/mnt/data" --user=root \
    --auth-root-authentication-method=normal --skip-test-db "${opts[@]}" >"$DIR/$s/install.log" 2>&1
  mariadbd --no-defaults --datadir="$DIR/$s/mnt/data" --socket="$DIR/$s/mysqld.sock" \
    --pid-file="$DIR/$s/mysqld.pid" --log-error="$DIR/$s/error.log" --tmpdir="$DIR/$s" \
    --skip-networking --user=root "${opts[@]}" 2>>"$DIR/$s/error.log" &
  MYSQLD_PID[$s]=$!
  for _ in $(seq 1 600); do client "$s" -e 'select 1' >/dev/null 2>&1 && break; sleep 0.1; done
  client "$s" -e 'CREATE DATABASE sbtest'
  sb "$s" oltp_write_only prepare >"$DIR/$s/prepare.log"
  sync -f "$DIR/$s/mnt"
  echo "# $s: $(client "$s" -e 'SELECT @@innodb_doublewrite, @@innodb_flush_method, @@innodb_page_size') on ${LOOP[$s]} ($(cat "/sys/block/${LOOP[$s]#/dev/}/queue/logical_block_size") B sectors, dio $(cat "/sys/block/${LOOP[$s]#/dev/}/loop/dio"))"
}

ftld_bytes() {  # "user media writes flushes" so far (bytes; NBD requests of all volumes)
  "$FTLCTL" --control "$DIR/$1/ctl.sock" --json stats |
    /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); p=r["pool"]; v=r["volumes"]
print(p["user_write_bytes"], p["media_write_bytes"], sum(x["writes"] for x in v), sum(x["flushes"] for x in v))'
}

disk_reads() {  # bytes a process has read from its disk so far (page-cache misses)
  awk '/^read_bytes:/ {print $2}' "/proc/$1/io"
}

cpu_ticks() {  # user + system clock ticks of a process so far
  awk '{print $14 + $15}' "/proc/$1/stat"
}

# After a run, the stack's InnoDB goes on writing back dirty pages for a
# while, on the CPUs and the disk the next stack's run needs; and the
# order of the stacks is cyclic (only its start rotates), so each stack
# always follows the same one. Without this drain the stack after
# nbdkit-dw1 (whose write-back is cheapest) ran 6-8% faster whatever it
# was (bench/JOURNAL.md, 2026-11-27 19:32-20:34). Bounded: 120 s.
drain() {  # stack
  local s=$1 pct dirty=0 t0=$SECONDS
  pct=$(client "$s" -e 'SELECT @@innodb_max_dirty_pages_pct')
  client "$s" -e 'SET GLOBAL innodb_max_dirty_pages_pct = 0'
  while (( SECONDS - t0 < 120 )); do
    dirty=$(client "$s" -e "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_BUFFER_POOL_PAGES_DIRTY'")
    (( dirty <= 16 )) && break
    sleep 1
  done
  client "$s" -e "SET GLOBAL innodb_max_dirty_pages_pct = $pct"
  echo "      drained $s in $(( SECONDS - t0 )) s ($dirty dirty pages left)"
}

run_one() {  # stack workload round
  local s=$1 w=$2 r=$3 loop=${LOOP[$1]#/dev/} u0=0 m0=0 u1=0 m1=0 n0=0 f0=0 n1=0 f1=0
  if [[ $s == ftld* ]]; then read -r u0 m0 n0 f0 < <(ftld_bytes "$s"); fi
  local w0 c0 d0 lr0 dr0; w0=$(awk '{print $7}' "/sys/block/$loop/stat")
  lr0=$(awk '{print $3}' "/sys/block/$loop/stat"); dr0=$(disk_reads "${SERVER_PID[$s]}")
  c0=$(cpu_ticks "${SERVER_PID[$s]}"); d0=$(cpu_ticks "${MYSQLD_PID[$s]}")
  sb "$s" "$w" --time="$TIME" --report-interval=0 run >"$DIR/$s/run-$w-$r.log"
  local w1 c1 d1 lr1 dr1; w1=$(awk '{print $7}' "/sys/block/$loop/stat")
  lr1=$(awk '{print $3}' "/sys/block/$loop/stat"); dr1=$(disk_reads "${SERVER_PID[$s]}")
  c1=$(cpu_ticks "${SERVER_PID[$s]}"); d1=$(cpu_ticks "${MYSQLD_PID[$s]}")
  if [[ $s == ftld* ]]; then read -r u1 m1 n1 f1 < <(ftld_bytes "$s"); fi
  local tps p95 txns
  tps=$(sed -n 's/.*transactions: *[0-9]* *(\([0-9.]*\) per sec.*/\1/p' "$DIR/$s/run-$w-$r.log")
  txns=$(sed -n 's/.*transactions: *\([0-9]*\) *(.*/\1/p' "$DIR/$s/run-$w-$r.log")
  p95=$(awk '/95th percentile/ {print $3}' "$DIR/$s/run-$w-$r.log")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$s" "$w" "$tps" "$p95" \
    $(( (w1 - w0) * 512 )) $((u1 - u0)) $((m1 - m0)) "$txns" $((c1 - c0)) $((d1 - d0)) \
    $((n1 - n0)) $((f1 - f0)) $(( (lr1 - lr0) * 512 )) $((dr1 - dr0)) >> "$RESULTS"
  tail -1 "$RESULTS" | awk -F'\t' -v hz="$(getconf CLK_TCK)" '{
    mu = ($7 > 0) ? sprintf("%.3f", $8 / $7) : "-";
    nbd = ($7 > 0) ? sprintf("  NBD writes %.1f flushes %.1f /txn", $12 / $9, $13 / $9) : "";
    printf "round %s %-10s %-16s TPS %8.1f  p95 %6.2f ms  loop %7.1f MiB (%5.1f KiB/txn)  user %7.1f MiB  media %7.1f MiB  media/user %s  CPU/txn server %4.0f us mariadbd %4.0f us%s  load %s\n",
      $1, $2, $3, $4, $5, $6 / 1048576, $6 / 1024 / $9, $7 / 1048576, $8 / 1048576, mu,
      $10 * 1e6 / hz / $9, $11 * 1e6 / hz / $9, nbd, L;
    printf "      reads: loop %.1f KiB/txn, server from its disk %.1f KiB/txn\n", $14 / 1024 / $9, $15 / 1024 / $9 }' L="$(load)"
}

echo "# $(date -u '+%F %T') UTC, $(nproc) cores, load $(load), dir $DIR ($(df -h --output=fstype "$DIR" | tail -1 | xargs)), ftld $FTLD"
echo "# sysbench $TABLES x $TABLE_SIZE rows, $THREADS threads, ${TIME}s runs, $ROUNDS rounds"
for s in "${STACKS[@]}"; do setup "$s"; done
for r in $(seq 1 "$ROUNDS"); do
  for i in "${!STACKS[@]}"; do
    s=${STACKS[$(( (i + r - 1) % ${#STACKS[@]} ))]}
    for w in oltp_write_only oltp_read_write; do run_one "$s" "$w" "$r"; drain "$s"; done
  done
done

/usr/bin/python3 - "$RESULTS" "$(getconf CLK_TCK)" <<'EOF'
import statistics, sys
hz = int(sys.argv[2])
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {}
for w in ("oltp_write_only", "oltp_read_write"):
    print(f"# {w}: medians over rounds")
    for s in ("ftld-dw0", "ftld-dw1", "nbdkit-dw1", "ftldb-dw0", "nbdkit-dw0"):
        rs = [r for r in rows if r[1] == s and r[2] == w]
        if not rs:
            continue
        tps = statistics.median(float(r[3]) for r in rs)
        p95 = statistics.median(float(r[4]) for r in rs)
        loop_per = sum(int(r[5]) for r in rs) / sum(int(r[8]) for r in rs)
        user, media = sum(int(r[6]) for r in rs), sum(int(r[7]) for r in rs)
        mu = f"{media / user:.3f}" if user else "-"
        med[(s, w)] = tps
        txns = sum(int(r[8]) for r in rs)
        cpu = sum(int(r[9]) for r in rs) / hz / txns * 1e6
        print(f"  {s:10s} TPS {tps:8.1f}  p95 {p95:6.2f} ms  loop {loop_per / 1024:5.1f} KiB/txn"
              f"  media/user {mu}  server CPU {cpu:4.0f} us/txn")
    a, b, c = (med.get((s, w)) for s in ("ftld-dw0", "ftld-dw1", "nbdkit-dw1"))
    if a and b and c:
        print(f"  ftld-dw0 / nbdkit-dw1 {a / c:.2f}x (goal 1.2)   ftld-dw0 / ftld-dw1 {a / b:.2f}x (goal 1.1)")
        for r in sorted({r[0] for r in rows}):
            t = {x[1]: float(x[3]) for x in rows if x[0] == r and x[2] == w}
            if {'ftld-dw0', 'ftld-dw1', 'nbdkit-dw1'} <= t.keys():
                print(f"    round {r}: {t['ftld-dw0'] / t['nbdkit-dw1']:.2f}x, {t['ftld-dw0'] / t['ftld-dw1']:.2f}x")
    d = med.get(("ftldb-dw0", w))
    if a and c and d:
        print(f"  ftldb-dw0 / nbdkit-dw1 {d / c:.2f}x   ftldb-dw0 / ftld-dw0 {d / a:.2f}x")
    e = med.get(("nbdkit-dw0", w))
    if c and e:
        print(f"  nbdkit-dw0 / nbdkit-dw1 {e / c:.2f}x (what doublewrite off buys without ftld)")
EOF
echo "# load at the end $(load)"
