#!/usr/bin/env bash
# NBD over TLS: fio (--ioengine=nbd, 1 job) against ftld and `nbdkit file`
# with the same TLS settings (--tls=require, X.509 certificates made here
# with certtool, TLS 1.3), alternating rounds in one run (forward order in
# odd rounds, reverse in even ones), on backing files in one directory.
#
#   bench/tls_compare.sh [--ftld PATH] [--dir DIR] [--rounds N] [--runtime SEC]
#                        [--size SIZE] [--plain] [--base FTLD] [--quick]
#                        [--ftld-flags "..."]
#
# --plain      also both servers without TLS (what TLS costs each)
# --base FTLD  also FTLD and --ftld without TLS, side by side (checks that
#              plaintext connections did not get slower)
# --quick      3 s per workload, 2 rounds, 256 MiB working set (a smoke run)
# --ftld-flags added to every ftld's command line, e.g. "--preallocate": a
#              backing file allocated in full is never hole-punched, so
#              its log writes over allocated, cached blocks as nbdkit's
#              fio writes do over its working set (bench/RESULTS.md, TLS,
#              2026-11-28 20:40). Without it the cleaner gives free
#              segments back (punch hole) after 2 s without I/O, i.e.
#              while the other servers run, and the next run writes
#              into holes: new page-cache pages and block allocations.
#
# Workloads (QD 32): 4 KiB randwrite, 4 KiB randread, 128 KiB sequential
# write, 128 KiB sequential read. fio's nbd engine connects with libnbd's
# nbd_connect_uri, which refuses the tls-certificates= URI parameter
# (nbd_set_uri_allow_local_file is not called), so fio finds the CA in
# libnbd's default directory: HOME is pointed at $DIR/home, whose
# .pki/libnbd/ca-cert.pem is the test CA. Prints per-round IOPS / MiB/s and
# the medians with the ratio ftld/nbdkit, and each server's CPU time per
# request (utime + stime of its process over the fio run / requests: less
# sensitive to the machine's load than IOPS). Only prints (never a timed
# assertion). Kills only what it started.
# Every fio run starts after a `sync`: otherwise one server's dirty page
# cache is written back during the next server's run (bench/RESULTS.md,
# TLS, 2026-11-28).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
BENCH_NAME=tls_compare
# shellcheck source=bench/bench_lib.sh
source "$here/bench_lib.sh"
FTLD="${here}/../build/daemon/ftld"
DIR="" ROUNDS=3 RUNTIME=10 SIZE=1G BACKING=4G PLAIN=0 BASE="" FTLD_FLAGS=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ftld) FTLD="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --rounds) ROUNDS="$2"; shift 2 ;;
    --runtime) RUNTIME="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --plain) PLAIN=1; shift ;;
    --base) BASE="$2"; shift 2 ;;
    --ftld-flags) FTLD_FLAGS="$2"; shift 2 ;;
    --quick) SIZE=256M; BACKING=1G; RUNTIME=3; ROUNDS=2; shift ;;
    -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
for tool in fio nbdkit nbdinfo certtool; do
  command -v "$tool" >/dev/null || { echo "tls_compare: $tool not installed" >&2; exit 2; }
done
[[ -x "$FTLD" ]] || { echo "tls_compare: no ftld at $FTLD (use --ftld)" >&2; exit 2; }
[[ -z "$BASE" || -x "$BASE" ]] || { echo "tls_compare: no ftld at $BASE" >&2; exit 2; }

DIR="${DIR:-$(mktemp -d "${TMPDIR:-/var/tmp}/ftld-tls.XXXXXX")}"
mkdir -p "$DIR"
PIDS=()
cleanup() {
  stop_all
  rm -rf "$DIR"/*.img "$DIR"/*.raw "$DIR"/*.sock "$DIR"/pki "$DIR"/home "$DIR"/*.json
}
trap cleanup EXIT

# Certificates as nbdkit's and this project's tests make them.
PKI="$DIR/pki"
mkdir -p "$PKI/server" "$DIR/home/.pki/libnbd"
(
  cd "$PKI"
  certtool --generate-privkey --outfile ca-key.pem 2>/dev/null
  printf 'cn = bench CA\nca\ncert_signing_key\nexpiration_days = 2\n' > ca.info
  certtool --generate-self-signed --load-privkey ca-key.pem --template ca.info \
    --outfile server/ca-cert.pem 2>/dev/null
  certtool --generate-privkey --outfile server/server-key.pem 2>/dev/null
  printf 'cn = localhost\ndns_name = localhost\nip_address = 127.0.0.1\ntls_www_server\nencryption_key\nsigning_key\nexpiration_days = 2\n' > server.info
  certtool --generate-certificate --load-ca-certificate server/ca-cert.pem \
    --load-ca-privkey ca-key.pem --load-privkey server/server-key.pem --template server.info \
    --outfile server/server-cert.pem 2>/dev/null
)
cp "$PKI/server/ca-cert.pem" "$DIR/home/.pki/libnbd/ca-cert.pem"

# CPU ticks (1/100 s) a process has used.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Waits (bounded, 20 s) until $1 answers nbdinfo.
wait_uri() {
  for _ in $(seq 1 400); do
    nbdinfo --size "$1" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "tls_compare: nothing serving $1" >&2; return 1
}

declare -A URI SPID
SERVERS=()
start_ftld() {  # name binary tls(0/1)
  local port; port=$(free_port)
  local tls_args=()
  [[ $3 == 1 ]] && tls_args=(--tls=require --tls-certificates "$PKI/server")
  local extra=()
  read -r -a extra <<< "$FTLD_FLAGS"
  "$2" --size "$BACKING" --port "$port" --control "$DIR/$1.sock" --log-level warn \
    "${tls_args[@]}" "${extra[@]}" "$DIR/$1.img" 2>"$DIR/$1.log" &
  PIDS+=($!)
  SPID[$1]=$!
  SERVERS+=("$1")
  if [[ $3 == 1 ]]; then URI[$1]="nbds://127.0.0.1:$port/"; else URI[$1]="nbd://127.0.0.1:$port/"; fi
}
start_nbdkit() {  # name tls(0/1)
  local port; port=$(free_port)
  local tls_args=()
  [[ $2 == 1 ]] && tls_args=(--tls=require "--tls-certificates=$PKI/server")
  truncate -s "$SIZE" "$DIR/$1.raw"
  nbdkit -f -p "$port" -i 127.0.0.1 "${tls_args[@]}" file "$DIR/$1.raw" 2>"$DIR/$1.log" &
  PIDS+=($!)
  SPID[$1]=$!
  SERVERS+=("$1")
  if [[ $2 == 1 ]]; then URI[$1]="nbds://127.0.0.1:$port/"; else URI[$1]="nbd://127.0.0.1:$port/"; fi
}
start_ftld ftld-tls "$FTLD" 1
start_nbdkit nbdkit-tls 1
if [[ $PLAIN == 1 || -n "$BASE" ]]; then start_ftld ftld-plain "$FTLD" 0; fi
if [[ $PLAIN == 1 ]]; then start_nbdkit nbdkit-plain 0; fi
if [[ -n "$BASE" ]]; then start_ftld base-plain "$BASE" 0; fi
export HOME="$DIR/home"  # libnbd's default certificate directory (see above)
for s in "${SERVERS[@]}"; do wait_uri "${URI[$s]}"; done

echo "# $(date -u '+%F %T') UTC, load $(load), directory $DIR ($(df -h --output=fstype "$DIR" | tail -1 | xargs))"
echo "# working set $SIZE, ${RUNTIME}s per workload, $ROUNDS rounds, fio $(fio --version), $(nbdkit --version)"
echo "# servers: ${SERVERS[*]}${FTLD_FLAGS:+ (ftld flags: $FTLD_FLAGS)}"
for s in "${SERVERS[@]}"; do
  fio --name=fill --ioengine=nbd --uri="${URI[$s]}" --rw=write --bs=1m --iodepth=8 \
      --size="$SIZE" --output=/dev/null
done

WORKLOADS=("randwrite 4k" "randread 4k" "write 128k" "read 128k")
rows=""
for r in $(seq 1 "$ROUNDS"); do
  order=("${SERVERS[@]}")
  if (( r % 2 == 0 )); then
    order=(); for ((i = ${#SERVERS[@]} - 1; i >= 0; i--)); do order+=("${SERVERS[i]}"); done
  fi
  for w in "${WORKLOADS[@]}"; do
    read -r rw bs <<<"$w"
    for s in "${order[@]}"; do
      out="$DIR/fio-$s-$rw-$bs-$r.json"
      sync  # the last run's dirty pages go to the disk now, not during this one
      t0=$(cpu_ticks "${SPID[$s]}")
      fio --name="$s" --ioengine=nbd --uri="${URI[$s]}" --rw="$rw" --bs="$bs" --iodepth=32 \
          --numjobs=1 --size="$SIZE" --time_based --runtime="$RUNTIME" --ramp_time=1 \
          --output-format=json --output="$out" >/dev/null
      t1=$(cpu_ticks "${SPID[$s]}")
      line=$(/usr/bin/python3 - "$out" "$((t1 - t0))" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["jobs"][0]
side = d["write"] if d["write"]["io_bytes"] else d["read"]
# server CPU per request, us (the ramp second's requests are not in
# total_ios but its CPU is in the ticks: a slight overestimate for all)
print("%.0f %.1f %.1f" % (side["iops"], side["bw_bytes"] / 2**20,
                          int(sys.argv[2]) * 1e4 / max(1, side["total_ios"])))
PY
)
      echo "round $r $rw $bs $s: IOPS MiB/s server-us/op $line (load $(load))"
      rows+="$s $rw $bs $line"$'\n'
    done
  done
done
/usr/bin/python3 - "${SERVERS[@]}" <<EOF
import statistics, sys
servers = sys.argv[1:]
rows = """$rows"""
res = {}
for l in rows.strip().splitlines():
    s, rw, bs, iops, mib, cpu = l.split()
    res.setdefault((rw, bs), {}).setdefault(s, []).append((float(iops), float(mib), float(cpu)))
print(f"{'workload':<16}" + "".join(f"{s:>14}" for s in servers) + "   ftld-tls/nbdkit-tls (per round)")
for (rw, bs), by in res.items():
    med = {s: statistics.median(v[0] for v in by[s]) for s in servers}
    per_round = [f / k for f, k in zip((v[0] for v in by["ftld-tls"]), (v[0] for v in by["nbdkit-tls"]))]
    extra = ""
    if "base-plain" in med:
        extra = f"; plain ftld/base {med['ftld-plain'] / med['base-plain']:.2f}x"
    print(f"{rw + ' ' + bs:<16}" + "".join(f"{med[s]:>14.0f}" for s in servers)
          + f"   {med['ftld-tls'] / med['nbdkit-tls']:.2f}x ("
          + ", ".join(f"{x:.2f}" for x in per_round) + ")" + extra)
print("(median IOPS; 128k rows: x 0.125 = MiB/s)")
print()
print(f"{'server CPU us/op':<16}" + "".join(f"{s:>14}" for s in servers))
for (rw, bs), by in res.items():
    print(f"{rw + ' ' + bs:<16}" + "".join(f"{statistics.median(v[2] for v in by[s]):>14.1f}" for s in servers))
EOF
echo "# load at the end: $(load)"
