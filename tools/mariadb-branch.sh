#!/usr/bin/env bash
# Branch a running MariaDB on ftld: a writable copy of its volume, taken at
# one instant and served as a new export, with a second MariaDB on it
# (README, "Databases on ftld"; docs/decisions.md, "Issue 25: the
# whole-stack tests").
#
#   tools/mariadb-branch.sh create --name NAME --uri nbd://HOST:PORT --dir DIR
#       [--ftlctl PATH] [--control SOCK] [--volume VOL] [--datadir REL]
#       [--sector-size N] [--freeze MOUNTPOINT] [-- MARIADBD-OPTION...]
#   tools/mariadb-branch.sh destroy --dir DIR [--ftlctl PATH] [--control SOCK]
#
# create: `ftlctl snapshot create NAME` of VOL (default: the primary volume),
# `ftlctl snapshot activate NAME --export NAME` (writable), nbdfuse of
# URI/NAME under DIR/fuse, a loop device (direct I/O, --sector-size, default
# 4096: as the source's), mount at DIR/mnt (ext4 replays its journal), then
# mariadbd on DIR/mnt/REL (REL default "data") with its own socket
# DIR/mysqld.sock, no networking, error log DIR/error.log; InnoDB recovers
# as after a power cut. Give the source's InnoDB options after `--` (at
# least the same innodb_log_file_size and page size). Prints the time from
# the command to the first answered query, per step, and writes DIR/branch.env
# (what destroy needs). No fsfreeze by default: the snapshot is what a power
# cut at that instant would leave, which ext4 and InnoDB recover from;
# --freeze MOUNTPOINT freezes the source's file system around the snapshot
# (the copy then needs no journal replay, and the source's writes stall for
# the freeze).
#
# destroy: stops the branch's mariadbd, unmounts, detaches the loop device
# (only while it still holds the branch's nbdfuse file: a detached number may
# already serve another file) and nbdfuse, `ftlctl snapshot delete NAME
# --force` (which deactivates the export and frees its private writes in one
# step), removes DIR/branch.env and prints what the branch cost: the
# snapshot's exclusive bytes and the pool's live bytes it freed.
#
# Needs root (losetup, mount). Stops only the processes it started (by the
# pids in DIR). Exit status 0 ok, 1 a step failed (create undoes what it
# did), 2 usage.
set -euo pipefail

usage() { sed -n '2,36p' "$0"; exit 2; }
[[ $# -ge 1 ]] || usage
VERB=$1; shift
NAME="" URI="" DIR="" FTLCTL="" CONTROL="" VOLUME="" REL=data SECTOR=4096 FREEZE=""
MYSQLD_OPTS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --name) NAME=$2; shift 2 ;;
    --uri) URI=${2%/}; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --ftlctl) FTLCTL=$2; shift 2 ;;
    --control) CONTROL=$2; shift 2 ;;
    --volume) VOLUME=$2; shift 2 ;;
    --datadir) REL=$2; shift 2 ;;
    --sector-size) SECTOR=$2; shift 2 ;;
    --freeze) FREEZE=$2; shift 2 ;;
    --) shift; MYSQLD_OPTS=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "mariadb-branch: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "$DIR" ]] || { echo "mariadb-branch: --dir is required" >&2; exit 2; }
if [[ -z "$FTLCTL" ]]; then
  FTLCTL=$(command -v ftlctl || true)
  [[ -n "$FTLCTL" ]] || FTLCTL="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/tools/ftlctl"
fi
CTL=("$FTLCTL")
[[ -n "$CONTROL" ]] && CTL+=(--control "$CONTROL")

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }

# True while $LOOP is attached to this branch's nbdfuse file.
loop_is_ours() {
  local backing
  backing=$(cat "/sys/block/${LOOP#/dev/}/loop/backing_file" 2>/dev/null) || return 1
  [[ "$backing" == "${LOOP_BACKING:-$(realpath -m "$DIR/fuse/disk")}" ]]
}

destroy() {
  # shellcheck disable=SC1091
  source "$DIR/branch.env"
  if [[ -n "${MYSQLD_PID:-}" ]] && kill -0 "$MYSQLD_PID" 2>/dev/null; then
    kill "$MYSQLD_PID"
    for _ in $(seq 1 600); do kill -0 "$MYSQLD_PID" 2>/dev/null || break; sleep 0.1; done
  fi
  if mountpoint -q "$DIR/mnt"; then umount "$DIR/mnt"; fi
  # Only while the device is still this branch's: once detached, its
  # number may already serve another program's file (docs/decisions.md,
  # "A loop device is detached only while it is still ours").
  if [[ -n "${LOOP:-}" ]] && loop_is_ours; then
    losetup -d "$LOOP"
    for _ in $(seq 1 300); do loop_is_ours || break; sleep 0.1; done
  fi
  if grep -q " $DIR/fuse " /proc/mounts; then fusermount3 -u "$DIR/fuse"; fi
  if [[ -n "${NBDFUSE_PID:-}" ]]; then
    for _ in $(seq 1 300); do kill -0 "$NBDFUSE_PID" 2>/dev/null || break; sleep 0.1; done
  fi
  local before after excl
  excl=$("${CTL[@]}" --json snapshot list | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
print(next((s["exclusive_bytes"] for s in r["snapshots"] if s["name"] == sys.argv[1] and s["volume"] == sys.argv[2]), 0))' "$SNAPSHOT" "$SOURCE_VOLUME")
  before=$("${CTL[@]}" --json stats | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["pool"]["live_bytes"])')
  "${CTL[@]}" snapshot delete "$SOURCE_VOLUME@$SNAPSHOT" --force >/dev/null
  after=$("${CTL[@]}" --json stats | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["pool"]["live_bytes"])')
  # The branch is gone: a second destroy finds nothing to undo.
  rm -f "$DIR/branch.env"
  echo "branch $SNAPSHOT destroyed: snapshot exclusive bytes $excl, live bytes freed $((before - after))"
}

case "$VERB" in
  destroy)
    [[ -f "$DIR/branch.env" ]] || { echo "mariadb-branch: no $DIR/branch.env" >&2; exit 1; }
    destroy
    exit 0 ;;
  create) ;;
  *) usage ;;
esac

[[ -n "$NAME" && -n "$URI" ]] || { echo "mariadb-branch: create needs --name and --uri" >&2; exit 2; }
for tool in nbdfuse losetup mount mariadbd mariadb fusermount3; do
  command -v "$tool" >/dev/null || { echo "mariadb-branch: $tool not installed" >&2; exit 1; }
done
mkdir -p "$DIR/fuse" "$DIR/mnt"
rm -f "$DIR/branch.env" "$DIR/nbdfuse.pid"

T0=$(now)
if [[ -z "$VOLUME" ]]; then
  VOLUME=$("${CTL[@]}" --json status | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
print(next(e["volume"] for e in r["exports"] if e["name"] == ""))')
fi
{
  echo "SNAPSHOT=$NAME"
  echo "SOURCE_VOLUME=$VOLUME"
} > "$DIR/branch.env"
undo() {
  echo "mariadb-branch: create failed; undoing" >&2
  destroy >/dev/null 2>&1 || true
}
trap undo ERR

if [[ -n "$FREEZE" ]]; then
  fsfreeze -f "$FREEZE"
  if ! "${CTL[@]}" snapshot create "$VOLUME@$NAME" >/dev/null; then
    fsfreeze -u "$FREEZE"; exit 1
  fi
  fsfreeze -u "$FREEZE"
else
  "${CTL[@]}" snapshot create "$VOLUME@$NAME" >/dev/null
fi
T_SNAP=$(since "$T0")
"${CTL[@]}" snapshot activate "$VOLUME@$NAME" --export "$NAME" >/dev/null
T_ACT=$(since "$T0")

setsid nbdfuse -P "$DIR/nbdfuse.pid" "$DIR/fuse/disk" "$URI/$NAME" </dev/null >"$DIR/nbdfuse.log" 2>&1 &
echo "NBDFUSE_PID=$!" >> "$DIR/branch.env"
for _ in $(seq 1 600); do [[ -s "$DIR/nbdfuse.pid" ]] && break; sleep 0.01; done
[[ -s "$DIR/nbdfuse.pid" ]] || { echo "mariadb-branch: nbdfuse did not start: $(cat "$DIR/nbdfuse.log")" >&2; false; }
LOOP=$(losetup --direct-io=on --sector-size "$SECTOR" --find --show "$DIR/fuse/disk")
echo "LOOP=$LOOP" >> "$DIR/branch.env"
printf 'LOOP_BACKING=%q\n' "$(cat "/sys/block/${LOOP#/dev/}/loop/backing_file")" >> "$DIR/branch.env"
T_LOOP=$(since "$T0")
mount -t ext4 "$LOOP" "$DIR/mnt"
T_MOUNT=$(since "$T0")

SOCK="$DIR/mysqld.sock"
setsid mariadbd --no-defaults --datadir="$DIR/mnt/$REL" --socket="$SOCK" \
  --pid-file="$DIR/mysqld.pid" --log-error="$DIR/error.log" --tmpdir="$DIR" \
  --skip-networking --user=root "${MYSQLD_OPTS[@]+"${MYSQLD_OPTS[@]}"}" </dev/null >/dev/null 2>&1 &
MYSQLD_PID=$!
echo "MYSQLD_PID=$MYSQLD_PID" >> "$DIR/branch.env"
echo "SOCKET=$SOCK" >> "$DIR/branch.env"
for _ in $(seq 1 6000); do
  mariadb --no-defaults -uroot --socket="$SOCK" -e 'select 1' >/dev/null 2>&1 && break
  kill -0 "$MYSQLD_PID" 2>/dev/null || { echo "mariadb-branch: mariadbd exited: $(tail -5 "$DIR/error.log")" >&2; false; }
  sleep 0.02
done
mariadb --no-defaults -uroot --socket="$SOCK" -e 'select 1' >/dev/null
T_QUERY=$(since "$T0")
trap - ERR
echo "branch $NAME of $VOLUME: queryable at $SOCK after $T_QUERY s" \
     "(snapshot $T_SNAP, activate $T_ACT, nbdfuse+loop $T_LOOP, mount $T_MOUNT; $LOOP)"
