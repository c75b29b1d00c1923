#!/usr/bin/env bash
# What `ftld --metrics` costs on the NBD request path (issue 24): fio 4 KiB
# random writes at QD32 (plaintext, 1 job) against two ftld builds, A
# without metrics (e.g. main) and B with --metrics (per-export request
# counters and latency histograms: two clock reads and a few relaxed atomic
# adds per request, nbd/request_metrics.h), alternating A B rounds on
# backing files in one directory.
#
#   bench/metrics_ab.sh --a OLD_FTLD --b NEW_FTLD [--dir DIR] [--rounds N]
#                       [--runtime SEC] [--scrape SEC]
#
# A third server, C, is NEW_FTLD without --metrics (what the build costs
# apart from the counters). The order of A, B, C rotates every round
# (A B C, B C A, C A B, ...) so that no server always runs first.
#
# --scrape SEC: also GET B's /metrics every SEC seconds during B's rounds
# (Prometheus' default interval is 15 s; 0, the default: never), and print
# how long one scrape took. Prints IOPS and mean / p99 completion latency per
# round, the medians and B/A. Only prints (never a timed assertion). Kills
# only what it started.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=metrics_ab
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
A="" B="" DIR="" ROUNDS=5 RUNTIME=10 SCRAPE=0 SIZE=1G
while [[ $# -gt 0 ]]; do
  case "$1" in
    --a) A="$2"; shift 2 ;;
    --b) B="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --runtime) RUNTIME="$2"; shift 2 ;;
    --scrape) SCRAPE="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$A" && -x "$B" ]] || { echo "metrics_ab: give --a and --b ftld binaries" >&2; exit 2; }
for tool in fio nbdinfo curl; do
  command -v "$tool" >/dev/null || { echo "metrics_ab: $tool not installed" >&2; exit 2; }
done
DIR="${DIR:-$(mktemp -d "${TMPDIR:-/var/tmp}/ftld-metrics.XXXXXX")}"
mkdir -p "$DIR"
PIDS=()
cleanup() { stop_all; rm -f "$DIR"/a.img "$DIR"/b.img "$DIR"/c.img "$DIR"/*.sock; }
trap cleanup EXIT

echo "# $(date -u +%FT%TZ) directory: $DIR ($(df -h --output=fstype "$DIR" | tail -1 | xargs)), 4k randwrite QD32, ${RUNTIME}s x $ROUNDS rounds, scrape every ${SCRAPE}s; load $(load)"
P_A=$(free_port); P_B=$(free_port); P_M=$(free_port)
"$A" --size 2G --port "$P_A" --control "$DIR/a.sock" --log-level warn "$DIR/a.img" 2>"$DIR/a.log" &
PIDS+=($!)
"$B" --size 2G --port "$P_B" --control "$DIR/b.sock" --log-level warn --metrics "127.0.0.1:$P_M" \
  "$DIR/b.img" 2>"$DIR/b.log" &
PIDS+=($!)
P_C=$(free_port)
"$B" --size 2G --port "$P_C" --control "$DIR/c.sock" --log-level warn "$DIR/c.img" 2>"$DIR/c.log" &
PIDS+=($!)
wait_port "$P_A"; wait_port "$P_B"; wait_port "$P_C"
declare -A URI=([A]="nbd://127.0.0.1:$P_A/" [B]="nbd://127.0.0.1:$P_B/" [C]="nbd://127.0.0.1:$P_C/")
# All volumes written once, so the rounds overwrite (the steady state).
for s in A B C; do
  fio --name=fill --ioengine=nbd --uri="${URI[$s]}" --rw=write --bs=1M --iodepth=8 \
      --size="$SIZE" --output-format=terse >/dev/null
done

rows=""
ORDERS=("A B C" "B C A" "C A B")
for r in $(seq 1 "$ROUNDS"); do
  for s in ${ORDERS[$(( (r - 1) % 3 ))]}; do
    out="$DIR/fio-$s-$r.json"
    scraper=""
    if [[ $s == B && $SCRAPE != 0 ]]; then
      ( while sleep "$SCRAPE"; do curl -s -o /dev/null "http://127.0.0.1:$P_M/metrics" || true; done ) &
      scraper=$!
    fi
    fio --name="$s" --ioengine=nbd --uri="${URI[$s]}" --rw=randwrite --bs=4k --iodepth=32 \
        --size="$SIZE" --time_based --runtime="$RUNTIME" \
        --output-format=json --output="$out" >/dev/null
    [[ -n "$scraper" ]] && { kill "$scraper"; wait "$scraper" 2>/dev/null || true; }
    line=$(/usr/bin/python3 - "$out" <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))["jobs"][0]["write"]
lat = w["clat_ns"]
print("%.0f %.1f %.1f" % (w["iops"], lat["mean"] / 1000, lat["percentile"]["99.000000"] / 1000))
PY
)
    echo "round $r $s: IOPS, mean us, p99 us: $line (load $(load))"
    rows+="$s $line"$'\n'
  done
done
t=$(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:$P_M/metrics")
echo "one scrape of B: ${t}s, $(curl -s "http://127.0.0.1:$P_M/metrics" | wc -c) bytes"
/usr/bin/python3 - <<EOF
import statistics
rows = """$rows"""
res = {}
for l in rows.strip().splitlines():
    s, iops, mean, p99 = l.split()
    res.setdefault(s, []).append((float(iops), float(mean), float(p99)))
med = {s: tuple(statistics.median(v[i] for v in vals) for i in range(3)) for s, vals in res.items()}
for s in ["A", "B", "C"]:
    print(f"median {s} {med[s][0]:>8.0f} IOPS {med[s][1]:>8.1f} us mean {med[s][2]:>8.1f} us p99")
for x, y in (("B", "A"), ("C", "A"), ("B", "C")):
    ratios = [b[0] / a[0] for a, b in zip(res[y], res[x])]
    print(f"{x}/{y} IOPS {med[x][0] / med[y][0]:.3f}x (per round: {', '.join(f'{v:.3f}' for v in ratios)})")
EOF
echo "# load at the end: $(uptime)"
