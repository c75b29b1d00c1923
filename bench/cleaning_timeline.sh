#!/usr/bin/env bash
# Throughput, latency and write amplification over time while the cleaner
# works, and around snapshots (issue 24: "a plot"). One ftld on a fresh
# backing file, fio 4 KiB random writes at QD32 over the whole volume for
# --runtime seconds: the first pass takes free segments, then the cleaner
# must free segments as fast as the writes use them. `ftld --metrics` is
# sampled every second (bench/metrics_timeline.py); --snapshot-at T,...
# takes a snapshot through the control socket at those seconds.
#
#   bench/cleaning_timeline.sh [--build DIR] [--dir DIR] [--size SIZE]
#                              [--runtime SEC] [--span PCT] [--snapshot-at T,T,...]
#                              [--out PREFIX] [--replot]
#
# --replot: only draw PREFIX.png again from PREFIX.tsv.
# --span PCT: write only the first PCT% of the volume (default 100). A
# snapshot keeps what it saw, so with snapshots the overwritten span must
# fit in the pool several times over: e.g. --span 25 --snapshot-at 20,40.
#
# Writes PREFIX.tsv (the series) and PREFIX.png (gnuplot, three panels:
# client write MiB/s and the cleaner's relocation MiB/s; mean and p99 write
# latency; free segments and write amplification per second; snapshots as
# vertical lines), and prints the series. Defaults: --build build-bench,
# --size 1G, --runtime 60, --out bench/plots/cleaning_timeline.
# Needs fio, gnuplot (gnuplot-nox), python3-prometheus-client. Only prints
# (never a timed assertion). Kills only what it started.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=cleaning_timeline
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
BUILD="$here/../build-bench" DIR="" SIZE=1G RUNTIME=60 SPAN=100 SNAPS="" REPLOT=0 OUT="$here/plots/cleaning_timeline"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --runtime) RUNTIME="$2"; shift 2 ;;
    --snapshot-at) SNAPS="$2"; shift 2 ;;
    --span) SPAN="$2"; shift 2 ;;
    --replot) REPLOT=1; shift ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
FTLD="$BUILD/daemon/ftld" FTLCTL="$BUILD/tools/ftlctl"
[[ -x "$FTLD" ]] || { echo "cleaning_timeline: no $FTLD (--build)" >&2; exit 2; }
for tool in fio gnuplot; do
  command -v "$tool" >/dev/null || { echo "cleaning_timeline: $tool not installed" >&2; exit 2; }
done
DIR="${DIR:-$(mktemp -d "${TMPDIR:-/var/tmp}/ftld-timeline.XXXXXX")}"
mkdir -p "$DIR" "$(dirname "$OUT")"
PIDS=()
cleanup() { stop_all; rm -f "$DIR"/pool.img "$DIR"/ctl.sock; }
trap cleanup EXIT

# Draws $OUT.png from $OUT.tsv (snapshot lines only if the series has any).
plot_png() {
  local SNAPLINE="" TITLE="${SPAN}% of a fresh ${SIZE} pool's volume"
  if grep -q snapshot "$OUT.tsv"; then
    SNAPLINE=', "" using (marks(1)):2 skip 1 with impulses lw 2 lc rgb "red" title "snapshot"'
  fi
  [[ -f "$OUT.title" ]] && TITLE="$(cat "$OUT.title")"
gnuplot <<EOF
set terminal pngcairo size 1000,900 font "sans,10" noenhanced
set output "$OUT.png"
set datafile separator "\t"
set key top right
set grid
set multiplot layout 3,1 title "ftld: 4 KiB random writes at QD32 over $TITLE (metrics sampled every second)"
# Snapshot marks: vertical lines where column 11 is not "-".
marks(col) = (strcol(11) ne "-") ? column(col) : 1/0
set ylabel "MiB/s"
plot "$OUT.tsv" using 1:2 skip 1 with lines lw 2 title "client writes", \
     "" using 1:10 skip 1 with lines title "cleaner relocation"$SNAPLINE
set ylabel "write latency (us)"
set logscale y
plot "$OUT.tsv" using 1:(\$4 > 0 ? \$4 : 1/0) skip 1 with lines lw 2 title "mean", \
     "" using 1:(\$5 > 0 ? \$5 : 1/0) skip 1 with steps title "p99 (bucket bound)"
unset logscale y
set ylabel "free segments"
set y2label "write amplification"
set y2tics
set ytics nomirror
set xlabel "seconds"
plot "$OUT.tsv" using 1:7 skip 1 with lines lw 2 title "free segments", \
     "" using 1:(\$6 > 0 ? \$6 : 1/0) skip 1 axes x1y2 with lines title "WA (per second)"
unset multiplot
EOF
}
if [[ $REPLOT == 1 ]]; then
  plot_png
  echo "wrote $OUT.png"
  exit 0
fi

P=$(free_port) M=$(free_port)
"$FTLD" --size "$SIZE" --port "$P" --control "$DIR/ctl.sock" --log-level warn \
  --metrics "127.0.0.1:$M" "$DIR/pool.img" 2>"$DIR/ftld.log" &
PIDS+=($!)
wait_port "$P"
echo "# $(date -u +%FT%TZ) $(git -C "$here" rev-parse --short HEAD 2>/dev/null) pool $SIZE, 4k randwrite QD32 over ${SPAN}% of the volume ${RUNTIME}s, snapshots at: ${SNAPS:-none}; load $(load)"
: > "$DIR/marks"
fio --name=t --ioengine=nbd --uri="nbd://127.0.0.1:$P/" --rw=randwrite --bs=4k --iodepth=32 \
    --size="${SPAN}%" --time_based --runtime="$RUNTIME" --output-format=json --output="$DIR/fio.json" >/dev/null &
FIO=$!
/usr/bin/python3 "$here/metrics_timeline.py" "http://127.0.0.1:$M/metrics" "$OUT.tsv" \
  --until-pid "$FIO" --mark-file "$DIR/marks" &
SAMPLER=$!
start=$SECONDS
for t in ${SNAPS//,/ }; do
  while (( SECONDS - start < t )); do sleep 0.2; done
  "$FTLCTL" --control "$DIR/ctl.sock" snapshot create "s$t" >/dev/null && echo "snapshot s$t" >> "$DIR/marks"
done
wait "$FIO"
wait "$SAMPLER" || true
/usr/bin/python3 - "$DIR/fio.json" <<'PY'
import json, sys
w = json.load(open(sys.argv[1]))["jobs"][0]["write"]
print("fio: %.0f IOPS, %.1f MiB/s, mean %.0f us, p99 %.0f us over the run" % (
    w["iops"], w["bw"] / 1024, w["clat_ns"]["mean"] / 1000, w["clat_ns"]["percentile"]["99.000000"] / 1000))
PY

echo "${SPAN}% of a fresh ${SIZE} pool's volume" > "$OUT.title"
column -t "$OUT.tsv"
plot_png
echo "wrote $OUT.tsv and $OUT.png; load at the end: $(uptime)"
