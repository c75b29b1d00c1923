#!/usr/bin/env bash
# Write amplification against fill, as a picture (issue 24: "a plot"):
# runs wa_bench (or reads a JSON it wrote) and draws the engine's WA for
# uniform and 80/20 random overwrites next to the cleaner models it prints
# (greedy, greedy writing the engine's record headers, the fluid limits;
# bench/RESULTS.md "Write amplification and the cleaner" explains them).
#
#   bench/plot_wa.sh [--build DIR] [--full] [--filter REGEX] [--json FILE]
#                    [--out PREFIX]
#
# Default: ./build-bench/bench/wa_bench (quick sizes), filter batch32,
# writes PREFIX.json (wa_bench's --benchmark_out), PREFIX.tsv and PREFIX.png,
# PREFIX = bench/plots/wa_vs_fill. --json FILE: plot that run instead of
# running. Needs gnuplot (gnuplot-nox). Only prints.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BUILD="$here/../build-bench" FULL="" FILTER=batch32 JSON="" OUT="$here/plots/wa_vs_fill"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --full) FULL=--full; shift ;;
    --filter) FILTER="$2"; shift 2 ;;
    --json) JSON="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v gnuplot >/dev/null || { echo "plot_wa: gnuplot not installed" >&2; exit 2; }
mkdir -p "$(dirname "$OUT")"
if [[ -z "$JSON" ]]; then
  JSON="$OUT.json"
  echo "# $(date -u +%FT%TZ) wa_bench ${FULL:-(quick)} --benchmark_filter=$FILTER; load $(cut -d' ' -f1 /proc/loadavg)"
  "$BUILD/bench/wa_bench" $FULL --benchmark_filter="$FILTER" \
    --benchmark_out="$JSON" --benchmark_out_format=json
fi
/usr/bin/python3 - "$JSON" "$OUT.tsv" <<'PY'
import json, re, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
rows = {}
for b in runs:
    m = re.match(r"WA/(uniform|hot80_20)/fill:([0-9.]+)/", b["name"])
    if not m or "WA" not in b:
        continue
    r = rows.setdefault(float(m.group(2)), {})
    kind = m.group(1)
    r[kind] = b["WA"]
    if kind == "uniform":
        for k in ("greedy", "greedy_hdr", "fluid"):
            r[k] = b.get(k, float("nan"))
    else:
        r["fluid_2class"] = b.get("fluid_2class", float("nan"))
cols = ["uniform", "greedy", "greedy_hdr", "fluid", "hot80_20", "fluid_2class"]
with open(sys.argv[2], "w") as f:
    f.write("fill\t" + "\t".join(cols) + "\n")
    for fill in sorted(rows):
        f.write("%.2f\t" % fill + "\t".join("%.3f" % rows[fill].get(c, float("nan")) for c in cols) + "\n")
print(open(sys.argv[2]).read(), end="")
PY
gnuplot <<EOF
set terminal pngcairo size 900,560 font "sans,10" noenhanced
set output "$OUT.png"
set datafile separator "\t"
set datafile missing "nan"
set title "ftld write amplification vs fill: random 4 KiB overwrites (wa_bench${FULL:+ --full}, $(basename "$JSON"))"
set xlabel "fill (volume blocks / physical segment space)"
set ylabel "write amplification (media bytes / user bytes)"
set key top left
# columns: 1 fill, 2 uniform, 3 greedy, 4 greedy_hdr, 5 fluid, 6 hot80_20, 7 fluid_2class
set grid
set logscale y 2
set ytics (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8)
set xrange [0.45:0.95]
plot "$OUT.tsv" using 1:2 skip 1 with linespoints lw 2 pt 7 title "ftld, uniform", \
     "" using 1:6 skip 1 with linespoints lw 2 pt 5 title "ftld, 80/20", \
     "" using 1:3 skip 1 with lines lw 1.5 dt 2 title "greedy model", \
     "" using 1:4 skip 1 with lines lw 1.5 dt 3 title "greedy model with ftld's headers", \
     "" using 1:5 skip 1 with lines lw 1.5 dt 4 title "fluid limit, uniform", \
     "" using 1:7 skip 1 with lines lw 1.5 dt 5 title "fluid limit, 80/20, perfect separation"
EOF
echo "wrote $OUT.tsv and $OUT.png"
