#!/usr/bin/env bash
# fio (--ioengine=nbd, 1 job) against ftld, `nbdkit file` and
# `qemu-nbd -f qcow2`, all on backing files in one directory (same
# filesystem), in one run. Prints IOPS / bandwidth / mean latency per
# workload and the ratios ftld/nbdkit and ftld/qemu-nbd.
#
#   bench/fio_compare.sh [--ftld PATH] [--dir DIR] [--size SIZE] [--runtime SEC] [--quick]
#
# Workloads: 4 KiB randwrite and randread at QD 32, 128 KiB sequential write
# and read at QD 32, and 4 KiB randwrite / randread at QD 1 (latency).
# --quick: 3 s per workload on a 256 MiB working set (a smoke run).
# Every fio run starts after a `sync` (one server's dirty page cache is
# otherwise written back during the next server's run).
# Never timed assertions: this only prints. Kills only what it started.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=fio_compare
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
FTLD="${here}/../build/daemon/ftld"
DIR=""
SIZE="1G"      # working set per server
BACKING="4G"   # ftld backing file (leaves room for over-provisioning + GC)
RUNTIME=20
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ftld) FTLD="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --runtime) RUNTIME="$2"; shift 2 ;;
    --quick) SIZE="256M"; BACKING="1G"; RUNTIME=3; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
for tool in fio nbdkit nbdinfo qemu-nbd qemu-img python3; do
  command -v "$tool" >/dev/null || { echo "fio_compare: $tool not installed" >&2; exit 2; }
done
[[ -x "$FTLD" ]] || { echo "fio_compare: no ftld at $FTLD (use --ftld)" >&2; exit 2; }

DIR="${DIR:-$(mktemp -d "${TMPDIR:-/var/tmp}/ftld-bench.XXXXXX")}"
mkdir -p "$DIR"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -f "$DIR"/ftld.img "$DIR"/nbdkit.raw "$DIR"/qemu.qcow2 "$DIR"/*.sock
}
trap cleanup EXIT


echo "# directory: $DIR ($(df -h --output=fstype,size "$DIR" | tail -1 | xargs))"
echo "# working set $SIZE, ${RUNTIME}s per workload, fio $(fio --version)"

# ftld
P_FTLD=$(free_port)
"$FTLD" --size "$BACKING" --port "$P_FTLD" --control "$DIR/ftld.sock" --log-level warn \
  "$DIR/ftld.img" 2>"$DIR/ftld.log" &
PIDS+=($!)
# nbdkit file (raw, same filesystem)
P_KIT=$(free_port)
truncate -s "$SIZE" "$DIR/nbdkit.raw"
nbdkit -f -p "$P_KIT" -i 127.0.0.1 file "$DIR/nbdkit.raw" &
PIDS+=($!)
# qemu-nbd qcow2
P_QEMU=$(free_port)
qemu-img create -q -f qcow2 "$DIR/qemu.qcow2" "$SIZE"
qemu-nbd -f qcow2 -b 127.0.0.1 -p "$P_QEMU" -x "" --cache=none --aio=threads -t "$DIR/qemu.qcow2" &
PIDS+=($!)
wait_port "$P_FTLD"; wait_port "$P_KIT"; wait_port "$P_QEMU"

declare -A URI=([ftld]="nbd://127.0.0.1:$P_FTLD/" [nbdkit]="nbd://127.0.0.1:$P_KIT/"
                [qemu]="nbd://127.0.0.1:$P_QEMU/")
SERVERS=(ftld nbdkit qemu)
WORKLOADS=("randwrite 4k 32" "randread 4k 32" "write 128k 32" "read 128k 32"
           "randwrite 4k 1" "randread 4k 1")

# Fill each target once so reads hit written data.
for s in "${SERVERS[@]}"; do
  fio --name=fill --ioengine=nbd --uri="${URI[$s]}" --rw=write --bs=1m --iodepth=8 \
      --size="$SIZE" --output=/dev/null
done

# fio JSON -> "iops bw_bytes mean_lat_us"
summarize() {
  python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["jobs"][0]
side = d["write"] if d["write"]["io_bytes"] else d["read"]
print("%.0f %d %.1f" % (side["iops"], side["bw_bytes"], side["clat_ns"]["mean"] / 1000))
PY
}

declare -A RES
for w in "${WORKLOADS[@]}"; do
  read -r rw bs qd <<<"$w"
  for s in "${SERVERS[@]}"; do
    out="$DIR/fio-$s-$rw-$bs-$qd.json"
    sync  # the last run's dirty pages go to the disk now, not during this one
    fio --name="$s" --ioengine=nbd --uri="${URI[$s]}" --rw="$rw" --bs="$bs" --iodepth="$qd" \
        --numjobs=1 --size="$SIZE" --time_based --runtime="$RUNTIME" --ramp_time=1 \
        --output-format=json --output="$out" >/dev/null
    RES["$s $w"]="$(summarize "$out")"
  done
done

python3 - "$SIZE" <<EOF
rows = """$(for w in "${WORKLOADS[@]}"; do for s in "${SERVERS[@]}"; do echo "$s $w ${RES["$s $w"]}"; done; done)"""
res = {}
for line in rows.strip().splitlines():
    s, rw, bs, qd, iops, bw, lat = line.split()
    res[(s, rw, bs, qd)] = (float(iops), float(bw), float(lat))
print(f"{'workload':<22}{'server':<8}{'IOPS':>10}{'MiB/s':>10}{'lat us':>10}")
for (rw, bs, qd) in [tuple(w.split()) for w in """${WORKLOADS[*]/%/;}""".split(";") if w.strip()]:
    for s in ["ftld", "nbdkit", "qemu"]:
        iops, bw, lat = res[(s, rw, bs, qd)]
        print(f"{rw + ' ' + bs + ' QD' + qd:<22}{s:<8}{iops:>10.0f}{bw / 2**20:>10.1f}{lat:>10.1f}")
    f, k, q = (res[(x, rw, bs, qd)] for x in ["ftld", "nbdkit", "qemu"])
    if qd == "1":
        print(f"{'':<22}latency ratio nbdkit/ftld {k[2] / f[2]:.2f}x, qemu/ftld {q[2] / f[2]:.2f}x (>1: ftld faster)")
    else:
        print(f"{'':<22}ratio ftld/nbdkit {f[0] / k[0]:.2f}x, ftld/qemu {f[0] / q[0]:.2f}x")
EOF
echo "# ftld stats after the run:"
"$(dirname "$FTLD")/../tools/ftlctl" --control "$DIR/ftld.sock" stats 2>/dev/null | \
  grep -E "write amplification|gc segments cleaned|user write|media write" || true
