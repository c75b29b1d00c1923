#!/usr/bin/env bash
# ftld's Redis-protocol server against redis-server (issue 23): the same
# redis-benchmark runs against ftld --kv-port and against Debian's
# redis-server with appendonly yes, for appendfsync always and everysec
# (ftld --kv-fsync always / everysec), alternating which server goes first
# every round, each started fresh by this script (127.0.0.1, a free port,
# its own directory under --dir on one file system) and stopped by its PID.
#
#   bench/resp_compare.sh [--ftld build/daemon/ftld] [--dir /var/tmp/respbench]
#                         [--requests 200000] [--sync-requests 50000]
#                         [--rounds 2] [--fsync "always everysec"]
#                         [--pipelines "1 16"] [--tests set,get,incr,mset]
#                         [--large-keys 1000000] [--no-large] [--quick]
#                         [--buffer-pages 65536] [--out FILE]
#                         [--ftld-b PATH] [--ftld-b-flags "..."]
#                         [--ftld-flags "..."] [--size 8G]
#
# Each run: redis-benchmark -t TEST -P P -c 50 -r 1000000 -d 100 -n N
# (N = --sync-requests with fsync always at -P 1, else --requests), one
# test at a time in the order set, get, incr, mset, so GETs find the keys
# the SETs wrote. Per run: ops/s, p50 and p99 (ms, from --csv), and the
# bytes written to the disk under --dir (/proc/diskstats sectors of its
# device, read after `sync -f`, so it includes the file system's journal
# and anything else writing to that disk meanwhile; raw lines: disk_bytes).
# The raw lines also keep the server process's /proc/PID/io write_bytes
# (write_bytes), but that can count far more than reaches the disk: on
# this machine's kernel (6.18), 1.9 GB for 20,000 INCRs of ftld
# --preallocate against 9 MB on the disk (likely a whole large page-cache
# folio counted for each small write into a preallocated file; 8 MB
# without --preallocate). ftld runs with --kv-buffer-pages
# --buffer-pages (default 65536 = 256 MiB, enough for the keys these runs
# write, as redis-server holds them all in memory).
#
# Then (unless --no-large) a dataset larger than ftld's key-value buffer
# (its default --kv-buffer-pages 1024 = 4 MiB): --large-keys SETs of 100-byte
# values in 50-key pipelines (everysec), then random SET and GET over all
# of them at -P 1 and -P 16; it reports the dataset's pages against the
# buffer's (INFO ipl) and each server's resident memory (VmRSS; redis-server
# holds every key in memory).
#
# ftld runs on a sparse --size backing file in --dir, with --ftld-flags
# added to its command line (e.g. "--preallocate").
#
# --ftld-b: a second ftld build (or the same with --ftld-b-flags) as a
# third server, "ftldb", started fresh in every round beside the others
# (the order rotating), for an A/B of ftld itself in the same run; its
# table gets columns of its own and its ratio to ftld.
#
# --quick: 20000 / 5000 requests, 1 round, 100000 large keys (a try-out).
# Raw "RESULT" lines go to --out (default DIR/resp_compare-DATE.txt), then a
# Markdown table of medians over the rounds. Only prints (no timed
# assertion). Run it under `flock /work/bench.lock` on a shared machine.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FTLD="$here/../build/daemon/ftld" DIR=/var/tmp/respbench REQ=200000 SYNC_REQ=50000
ROUNDS=2 FSYNCS="always everysec" PIPES="1 16" TESTS="set,get,incr,mset" OUT=""
LARGE=1 LARGE_KEYS=1000000 BUFFER_PAGES=65536 FTLD_B="" FTLD_B_FLAGS=""
FTLD_FLAGS="" SIZE=8G
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ftld) FTLD="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --requests) REQ="$2"; shift 2 ;;
    --sync-requests) SYNC_REQ="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --fsync) FSYNCS="$2"; shift 2 ;;
    --pipelines) PIPES="$2"; shift 2 ;;
    --tests) TESTS="$2"; shift 2 ;;
    --large-keys) LARGE_KEYS="$2"; shift 2 ;;
    --no-large) LARGE=0; shift ;;
    --buffer-pages) BUFFER_PAGES="$2"; shift 2 ;;
    --ftld-b) FTLD_B="$2"; shift 2 ;;
    --ftld-b-flags) FTLD_B_FLAGS="$2"; shift 2 ;;
    --ftld-flags) FTLD_FLAGS="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --quick) REQ=20000; SYNC_REQ=5000; ROUNDS=1; LARGE_KEYS=100000; shift ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,45p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
for tool in redis-server redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null || { echo "$tool not installed (Debian: redis-server, redis-tools)" >&2; exit 1; }
done
[[ -x "$FTLD" ]] || { echo "no ftld at $FTLD (build it, or give --ftld)" >&2; exit 1; }
[[ -z "$FTLD_B" || -x "$FTLD_B" ]] || { echo "no ftld at $FTLD_B (--ftld-b)" >&2; exit 1; }
mkdir -p "$DIR"
disk_src="$(df --output=source "$DIR" | tail -1)"
DISK_DEV="$(lsblk -no KNAME "$disk_src" 2>/dev/null | head -1)"
[[ -n "$DISK_DEV" ]] || DISK_DEV="$(basename "$disk_src")"
grep -q " $DISK_DEV " /proc/diskstats || echo "# no /proc/diskstats entry for $disk_src: disk MB reads 0" >&2
OUT="${OUT:-$DIR/resp_compare-$(date +%Y%m%d-%H%M%S).txt}"
: > "$OUT"
echo "# $(date -Is) $(uptime)" | tee -a "$OUT"
echo "# ftld $FTLD --size $SIZE $FTLD_FLAGS (--kv-buffer-pages $BUFFER_PAGES; 1024 in the large run); $(redis-server --version)" | tee -a "$OUT"
[[ -n "$FTLD_B" ]] && echo "# ftldb $FTLD_B $FTLD_B_FLAGS" | tee -a "$OUT"

PID="" PORT="" WORK=""
stop_server() {
  if [[ -n "$PID" ]] && kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID"
    for _ in $(seq 600); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$PID" 2>/dev/null && kill -KILL "$PID"
    wait "$PID" 2>/dev/null || true
  fi
  PID=""
}
trap 'stop_server; [[ -n "$WORK" ]] && rm -rf "$WORK"' EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
write_bytes() { awk '/^write_bytes/ {print $2}' "/proc/$PID/io"; }
# Bytes written to the device holding --dir (after pending writes reach it).
disk_bytes() {
  sync -f "$DIR"
  awk -v d="$DISK_DEV" '$3 == d {print $10 * 512; f = 1} END {if (!f) print 0}' /proc/diskstats
}
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$PID/status"; }

# start SERVER FSYNC [extra ftld flags]: fresh directory, sets PID and PORT.
start_server() {
  local server="$1" fsync="$2"; shift 2
  stop_server
  [[ -n "$WORK" ]] && rm -rf "$WORK"
  WORK="$(mktemp -d "$DIR/$server.XXXXXX")"
  if [[ "$server" == redis ]]; then
    PORT="$(free_port)"
    redis-server --port "$PORT" --bind 127.0.0.1 --dir "$WORK" --appendonly yes \
      --appendfsync "$fsync" --save "" --daemonize no --logfile "$WORK/redis.log" &
    PID=$!
    for _ in $(seq 300); do redis-cli -p "$PORT" ping 2>/dev/null | grep -q PONG && return 0; sleep 0.1; done
    echo "redis-server did not start: $(tail -5 "$WORK/redis.log")" >&2; exit 1
  else
    local bin="$FTLD" extra=() more=()
    read -r -a extra <<< "$FTLD_FLAGS"
    if [[ "$server" == ftldb ]]; then
      bin="$FTLD_B"
      read -r -a more <<< "$FTLD_B_FLAGS"
      extra+=("${more[@]}")
    fi
    "$bin" --size "$SIZE" --port 0 --control "$WORK/ctl.sock" --kv-port 0 --kv-fsync "$fsync" \
      "$@" "${extra[@]}" "$WORK/backing.img" > "$WORK/ftld.log" 2>&1 &
    PID=$!
    for _ in $(seq 300); do
      PORT="$(grep -oP 'RESP listening on 127\.0\.0\.1:\K\d+' "$WORK/ftld.log" || true)"
      [[ -n "$PORT" ]] && grep -q "ready:" "$WORK/ftld.log" && return 0
      sleep 0.1
    done
    echo "ftld did not start: $(tail -5 "$WORK/ftld.log")" >&2; exit 1
  fi
}

# bench LABEL TEST P N: one redis-benchmark run; prints a RESULT line.
bench() {
  local label="$1" test="$2" p="$3" n="$4" before after dbefore dafter csv
  dbefore="$(disk_bytes)"
  before="$(write_bytes)"
  csv="$(redis-benchmark -h 127.0.0.1 -p "$PORT" -t "$test" -P "$p" -c 50 -r 1000000 -d 100 \
         -n "$n" --csv 2>/dev/null | tail -1)"
  after="$(write_bytes)"
  dafter="$(disk_bytes)"
  # "SET","rps","avg","min","p50","p95","p99","max"
  IFS=, read -r _ rps _ _ p50 _ p99 _ <<< "${csv//\"/}"
  echo "RESULT $label test=$test P=$p n=$n ops=$rps p50_ms=$p50 p99_ms=$p99 write_bytes=$((after - before)) disk_bytes=$((dafter - dbefore))" \
    | tee -a "$OUT"
}

for ((round = 0; round < ROUNDS; round++)); do
  for fsync in $FSYNCS; do
    servers="ftld redis"
    ((round % 2)) && servers="redis ftld"
    if [[ -n "$FTLD_B" ]]; then
      case $((round % 3)) in
        0) servers="ftld ftldb redis" ;;
        1) servers="ftldb redis ftld" ;;
        2) servers="redis ftld ftldb" ;;
      esac
    fi
    for server in $servers; do
      start_server "$server" "$fsync" --kv-buffer-pages "$BUFFER_PAGES"
      for p in $PIPES; do
        n=$REQ
        [[ "$fsync" == always && "$p" == 1 ]] && n=$SYNC_REQ
        for test in ${TESTS//,/ }; do
          bench "round=$round server=$server fsync=$fsync" "$test" "$p" "$n"
        done
      done
      stop_server
    done
  done
done

if ((LARGE)); then
  for server in ftld redis; do
    start_server "$server" everysec --kv-buffer-pages 1024
    label="round=large server=$server fsync=everysec"
    # Fill: every key of 1..LARGE_KEYS once (random order, 50-key MSETs).
    python3 - "$PORT" "$LARGE_KEYS" <<'EOF'
import random, socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
keys = list(range(n)); random.Random(1).shuffle(keys)
val = b"x" * 100
def cmd(*a):
    return b"*%d\r\n" % len(a) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in a)
buf, pending = b"", 0
for i in range(0, n, 50):
    args = [b"MSET"]
    for k in keys[i:i + 50]:
        args += [b"key:%012d" % k, val]
    buf += cmd(*args); pending += 1
    if pending == 64 or i + 50 >= n:
        s.sendall(buf); got = b""
        while got.count(b"\r\n") < pending:
            got += s.recv(65536)
        assert got.count(b"+OK") == pending, got[:200]
        buf, pending = b"", 0
EOF
    info="$(redis-cli -p "$PORT" info ipl 2>/dev/null | tr -d '\r')"
    pages="$(awk -F: '/^pages:/ {print $2}' <<< "$info")"
    echo "RESULT $label test=fill keys=$LARGE_KEYS dataset_pages=${pages:-0} buffer_pages=1024 rss_kib=$(rss_kib)" | tee -a "$OUT"
    for p in 1 16; do
      for test in set get; do
        dbefore="$(disk_bytes)"
        before="$(write_bytes)"
        csv="$(redis-benchmark -h 127.0.0.1 -p "$PORT" -t "$test" -P "$p" -c 50 -r "$LARGE_KEYS" \
               -d 100 -n "$REQ" --csv 2>/dev/null | tail -1)"
        after="$(write_bytes)"
        dafter="$(disk_bytes)"
        IFS=, read -r _ rps _ _ p50 _ p99 _ <<< "${csv//\"/}"
        echo "RESULT $label test=$test P=$p n=$REQ ops=$rps p50_ms=$p50 p99_ms=$p99 write_bytes=$((after - before)) disk_bytes=$((dafter - dbefore)) rss_kib=$(rss_kib)" \
          | tee -a "$OUT"
      done
    done
    stop_server
  done
fi

python3 - "$OUT" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if not line.startswith("RESULT "):
        continue
    kv = dict(t.split("=", 1) for t in line.split()[1:] if "=" in t)
    if kv.get("round") == "large" or "ops" not in kv:
        continue
    rows[(kv["fsync"], kv["P"], kv["test"], kv["server"])].append(kv)
def med(rs, k):
    v = [float(r[k]) for r in rs if r.get(k) not in (None, "")]
    return statistics.median(v) if v else float("nan")
print("\n| fsync | -P | test | ftld ops/s | redis ops/s | ratio | ftld p50/p99 ms | redis p50/p99 ms | ftld disk MB | redis disk MB |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (fsync, p, test) in sorted({k[:3] for k in rows}, key=lambda k: (k[0], int(k[1]), k[2])):
    f, r = rows.get((fsync, p, test, "ftld"), []), rows.get((fsync, p, test, "redis"), [])
    fo, ro = med(f, "ops"), med(r, "ops")
    print(f"| {fsync} | {p} | {test} | {fo:,.0f} | {ro:,.0f} | {fo / ro:.2f}x | "
          f"{med(f, 'p50_ms'):.2f} / {med(f, 'p99_ms'):.2f} | {med(r, 'p50_ms'):.2f} / {med(r, 'p99_ms'):.2f} | "
          f"{med(f, 'disk_bytes') / 1e6:.1f} | {med(r, 'disk_bytes') / 1e6:.1f} |")
if any(k[3] == "ftldb" for k in rows):
    print("\n| fsync | -P | test | ftld ops/s | ftldb ops/s | ftldb / ftld | ftldb / redis | ftldb p50/p99 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for (fsync, p, test) in sorted({k[:3] for k in rows}, key=lambda k: (k[0], int(k[1]), k[2])):
        f, b, r = (rows.get((fsync, p, test, x), []) for x in ("ftld", "ftldb", "redis"))
        fo, bo, ro = med(f, "ops"), med(b, "ops"), med(r, "ops")
        print(f"| {fsync} | {p} | {test} | {fo:,.0f} | {bo:,.0f} | {bo / fo:.2f}x | {bo / ro:.2f}x | "
              f"{med(b, 'p50_ms'):.2f} / {med(b, 'p99_ms'):.2f} |")
EOF
echo "raw results: $OUT"
