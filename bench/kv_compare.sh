#!/usr/bin/env bash
# ftld's key-value store against RocksDB, LevelDB and LMDB (issue 21):
# runs bench/kv_peers once per engine, durability mode and round, each
# engine in its own process and its own subdirectory of --dir (one file
# system for all), the engines' order reversed every other round, and
# prints Markdown tables of the medians over the rounds.
#
#   bench/kv_compare.sh [--bin build/bench/kv_peers] [--dir /var/tmp/kvbench]
#                       [--keys 1000000] [--sync-ops 20000] [--rounds 2]
#                       [--engines "ftld rocksdb leveldb lmdb"]
#                       [--modes "nosync sync"] [--quick] [--out FILE]
#                       [-- extra kv_peers flags, e.g. --kv-mode merge]
#   bench/kv_compare.sh --tables RAW...   (only the tables, over the raw
#                       results of earlier runs together)
#
# --quick: 100000 keys, 2000 synced ops, 1 round (a try-out, ~2-3 min).
# Workloads (kv_peers.cc says exactly what each does): nosync: fillrandom,
# overwrite, readrandom, scan (1000-key ranges); sync: fillrandom and
# overwrite with a sync on every write, after an unsynced load of --keys.
# The raw "RESULT" lines go to --out (default DIR/kv_compare-DATE.txt).
# Runs every kv_peers under nice (do not nice the script as well: at nice 19
# the runs starve behind other users' builds). Only prints (never a timed
# assertion).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BIN="" DIR=/var/tmp/kvbench KEYS=1000000 SYNC_OPS=20000 ROUNDS=2 OUT=""
ENGINES="ftld rocksdb leveldb lmdb" MODES="nosync sync" EXTRA=() TABLES=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin) BIN="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --keys) KEYS="$2"; shift 2 ;;
    --sync-ops) SYNC_OPS="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --engines) ENGINES="$2"; shift 2 ;;
    --modes) MODES="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --quick) KEYS=100000; SYNC_OPS=2000; ROUNDS=1; shift ;;
    --tables) shift; TABLES=("$@"); break ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
tables() {
  python3 - <(cat "$@") <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if not line.startswith("RESULT "):
        continue
    kv = dict(t.split("=", 1) for t in line.split()[1:] if "=" in t)
    rows[(kv["mode"], kv["workload"], kv["engine"])].append(kv)

def med(key, mode, work, eng):
    vals = [float(r[key]) for r in rows.get((mode, work, eng), []) if key in r]
    return statistics.median(vals) if vals else None

engines = []
for (_, _, e) in rows:
    if e not in engines:
        engines.append(e)
order = ["ftld", "rocksdb", "leveldb", "lmdb"]
engines.sort(key=lambda e: order.index(e) if e in order else 99)
works = ["fillrandom", "overwrite", "readrandom", "scan"]
fmt = lambda v, f: "-" if v is None else f.format(v)
for mode in ["nosync", "sync"]:
    if not any(k[0] == mode for k in rows):
        continue
    print(f"\n### {mode} (medians of {max(len(v) for v in rows.values())} round(s))\n")
    head = "| workload | measure | " + " | ".join(engines)
    ratio = "ftld" in engines and "rocksdb" in engines
    print(head + (" | ftld/rocksdb |" if ratio else " |"))
    print("|---|---|" + "---|" * (len(engines) + (1 if ratio else 0)))
    for w in works:
        if not any(k[0] == mode and k[1] == w for k in rows):
            continue
        for key, name, f in [("ops_s", "ops/s", "{:.0f}"), ("p50_us", "p50 us", "{:.1f}"),
                             ("p99_us", "p99 us", "{:.1f}"), ("wa", "device bytes / user byte", "{:.2f}")]:
            vals = [med(key, mode, w, e) for e in engines]
            if all(v is None for v in vals):
                continue
            line = f"| {w} | {name} | " + " | ".join(fmt(v, f) for v in vals)
            if ratio:
                a, b = med(key, mode, w, "ftld"), med(key, mode, w, "rocksdb")
                line += " | " + ("-" if not a or not b else f"{a / b:.2f}x")
            print(line + " |")
    for key, name, f in [("wa", "whole run: device bytes / user byte", "{:.2f}"),
                         ("peak_rss_mib", "peak RSS MiB (VmHWM)", "{:.0f}"),
                         ("anon_rss_mib", "anonymous RSS MiB at the end", "{:.0f}"),
                         ("disk_mib", "disk space MiB at the end", "{:.0f}")]:
        vals = [med(key, mode, "total", e) for e in engines]
        line = f"| total | {name} | " + " | ".join(fmt(v, f) for v in vals)
        if ratio:
            a, b = med(key, mode, "total", "ftld"), med(key, mode, "total", "rocksdb")
            line += " | " + ("-" if not a or not b else f"{a / b:.2f}x")
        print(line + " |")
EOF
}
if (( ${#TABLES[@]} > 0 )); then tables "${TABLES[@]}"; exit 0; fi
if [[ -z "$BIN" ]]; then
  for b in "$here/../build-bench/bench/kv_peers" "$here/../build/bench/kv_peers"; do
    [[ -x "$b" ]] && { BIN="$b"; break; }
  done
fi
[[ -x "$BIN" ]] || { echo "kv_compare: no kv_peers binary (give --bin)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "kv_compare: python3 needed for the tables" >&2; exit 2; }
mkdir -p "$DIR"
OUT="${OUT:-$DIR/kv_compare-$(date -u +%Y%m%d-%H%M%S).txt}"
: >"$OUT"

{
  echo "# $(date -u '+%Y-%m-%d %H:%M:%S') UTC, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
  echo "# directory: $DIR ($(df -h --output=fstype,size "$DIR" | tail -1 | xargs))"
  echo "# keys $KEYS, synced ops $SYNC_OPS, rounds $ROUNDS, engines $ENGINES, modes $MODES ${EXTRA[*]:-}"
  echo "# binary: $BIN ($(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?'))"
} | tee -a "$OUT"

read -r -a order <<<"$ENGINES"
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 == 0 )); then
    rev=(); for ((i = ${#order[@]} - 1; i >= 0; i--)); do rev+=("${order[i]}"); done
    run=("${rev[@]}")
  else
    run=("${order[@]}")
  fi
  for mode in $MODES; do
    for e in "${run[@]}"; do
      echo "# round $r mode $mode engine $e (load $(cut -d' ' -f1 /proc/loadavg))" | tee -a "$OUT"
      nice "$BIN" --engine "$e" --mode "$mode" --dir "$DIR" --keys "$KEYS" --sync-ops "$SYNC_OPS" \
          --seed "$r" "${EXTRA[@]}" 2>"$DIR/kv_peers-$e.err" |
        sed "s/^RESULT /RESULT round=$r /" | tee -a "$OUT" | grep -E '^RESULT' | cut -c1-160 ||
        echo "# FAILED: round $r mode $mode engine $e: $(tail -3 "$DIR/kv_peers-$e.err")" | tee -a "$OUT"
    done
  done
done

tables "$OUT"
echo "# raw results: $OUT"
