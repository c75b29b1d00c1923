#!/usr/bin/env bash
# Peer numbers for range_bench (issue 5): btrfs reflinks (FICLONERANGE) on a
# loop-mounted btrfs image in DIR, measured the way issue 5 quotes them:
#  - single-call cost: 4 KiB FICLONERANGE calls between random offsets of
#    two files;
#  - whole-file clone of a SIZE file written sequentially, and of the same
#    file after random 4 KiB O_DIRECT overwrites (each one a new extent):
#    time, extent count (filefrag), time per extent.
#
#   bench/reflink_peer.sh [--dir DIR] [--size 8G] [--frag-writes N] [--calls N]
#
# Needs root, a kernel with btrfs, mkfs.btrfs (btrfs-progs), fio, filefrag.
# Unmounts and deletes what it made. Never asserts on time.
set -euo pipefail
DIR="${TMPDIR:-/var/tmp}"
SIZE="8G"
FRAG=262144
CALLS=20000
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dir) DIR="$2"; shift 2 ;;
    --size) SIZE="$2"; shift 2 ;;
    --frag-writes) FRAG="$2"; shift 2 ;;
    --calls) CALLS="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3
grep -qw btrfs /proc/filesystems || { echo "reflink_peer: kernel has no btrfs" >&2; exit 2; }
for t in mkfs.btrfs fio filefrag "$PY"; do
  command -v "$t" >/dev/null || { echo "reflink_peer: $t not installed" >&2; exit 2; }
done
WORK="$(mktemp -d "$DIR/ftld-reflink.XXXXXX")"
IMG="$WORK/btrfs.img"
MNT="$WORK/mnt"
mkdir -p "$MNT"
cleanup() {
  mountpoint -q "$MNT" && umount "$MNT"
  rm -rf "$WORK"
}
trap cleanup EXIT
gib=${SIZE%G}
truncate -s "$(( gib * 5 / 2 + 4 ))G" "$IMG"
mkfs.btrfs -q "$IMG"
mount -o loop "$IMG" "$MNT"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)," \
     "kernel $(uname -r), $(mkfs.btrfs --version | head -1), image on" \
     "$(df -h --output=fstype "$WORK" | tail -1 | xargs)"

# FICLONERANGE = _IOW(0x94, 13, struct file_clone_range) = 0x4020940d
clone_py() {
  "$PY" - "$@" <<'PY'
import fcntl, os, random, struct, sys, time
FICLONERANGE = 0x4020940D
def clone(dst_fd, src_fd, src_off, length, dst_off):
    fcntl.ioctl(dst_fd, FICLONERANGE, struct.pack("qQQQ", src_fd, src_off, length, dst_off))
mode = sys.argv[1]
if mode == "whole":
    src, dst = sys.argv[2], sys.argv[3]
    s = os.open(src, os.O_RDONLY)
    d = os.open(dst, os.O_RDWR | os.O_CREAT, 0o644)
    n = os.fstat(s).st_size
    t0 = time.perf_counter()
    clone(d, s, 0, n, 0)
    t1 = time.perf_counter()
    os.fsync(d)
    t2 = time.perf_counter()
    print("%.6f %.6f" % (t1 - t0, t2 - t1))
else:
    src, dst, calls = sys.argv[2], sys.argv[3], int(sys.argv[4])
    s = os.open(src, os.O_RDONLY)
    d = os.open(dst, os.O_RDWR | os.O_CREAT, 0o644)
    blocks = os.fstat(s).st_size // 4096
    os.ftruncate(d, blocks * 4096)
    rng = random.Random(5)
    pairs = [(rng.randrange(blocks) * 4096, rng.randrange(blocks) * 4096) for _ in range(calls)]
    lat = []
    t0 = time.perf_counter()
    for so, do in pairs:
        a = time.perf_counter()
        clone(d, s, so, 4096, do)
        lat.append(time.perf_counter() - a)
    t1 = time.perf_counter()
    lat.sort()
    print("%.3f %.3f %.3f %.0f" % (lat[len(lat) // 2] * 1e6, lat[int(len(lat) * 0.99)] * 1e6,
                                  (t1 - t0) / calls * 1e6, calls / (t1 - t0)))
PY
}
extents() { filefrag "$1" | sed -E 's/.*: ([0-9]+) extents? found/\1/'; }

fio --name=seq --filename="$MNT/seq" --rw=write --bs=1m --size="$SIZE" --iodepth=8 \
    --ioengine=psync --end_fsync=1 --output=/dev/null
sync
echo
printf "%-54s %12s %10s %14s\n" "operation" "time" "extents" "us per extent"
# Clones $MNT/seq whole into $1 and prints time, extents and time per extent.
whole_clone_row() {  # CLONE-NAME LABEL
  local t tsync e
  read -r t tsync <<<"$(clone_py whole "$MNT/seq" "$MNT/$1")"
  e=$(extents "$MNT/seq")
  printf "%-54s %10.3f ms %10s %14.3f   (fsync after: %.1f ms)\n" \
    "$2" "$(echo "$t*1000" | bc -l)" "$e" \
    "$(echo "$t*1000000/$e" | bc -l)" "$(echo "$tsync*1000" | bc -l)"
  rm -f "$MNT/$1"
}
whole_clone_row seq.clone "whole-file FICLONERANGE, $SIZE sequential"
# Fragment: random 4 KiB O_DIRECT overwrites, each a new extent (CoW).
fio --name=frag --filename="$MNT/seq" --rw=randwrite --bs=4k --size="$SIZE" --direct=1 \
    --ioengine=libaio --iodepth=32 --number_ios="$FRAG" --randrepeat=0 --norandommap \
    --end_fsync=1 --output=/dev/null
sync
whole_clone_row frag.clone "whole-file FICLONERANGE, after $FRAG random 4K writes"
read -r p50 p99 mean rate <<<"$(clone_py calls "$MNT/seq" "$MNT/calls" "$CALLS")"
printf "%-54s p50 %.2f us, p99 %.2f us, mean %.2f us (%.0f calls/s)\n" \
  "single 4 KiB FICLONERANGE calls ($CALLS, random offsets)" "$p50" "$p99" "$mean" "$rate"
echo "# load $(cut -d' ' -f1 /proc/loadavg)"
