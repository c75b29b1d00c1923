#!/usr/bin/env bash
# Runs libnbd's own interop tests against ftld (issue 24): the C tests in
# libnbd's source tree that start or reach "another server", built against
# Debian's libnbd-dev and pointed at ftld instead of qemu-nbd or nbdkit.
# Results and why each fails where it does: tests/README.md, "libnbd's
# interop tests".
#
#   tools/libnbd_interop.sh --libnbd-src DIR [--ftld PATH] [--keep]
#
# DIR: a libnbd source tree, best at the tag Debian 12 ships (v1.14.2), e.g.
# `git -C MIRROR worktree add /tmp/libnbd v1.14.2` or `apt-get source
# libnbd` where deb-src is configured. Not a CI test: the source is no
# Debian binary package (tools/packages.txt cannot install it). Needs
# libnbd-dev, a C compiler, nbdkit (its pattern plugin fills the export the
# parallel tests check) and nbdcopy.
#
# Each test prints PASS or FAIL with its output's last lines; "as shipped"
# is libnbd's source unchanged, "size patched" is a copy whose expected
# export size (a raw 1 MiB or 64 MiB file in the original) is set to ftld's
# export size, since ftld exports its pool's logical size, not the size of
# the file it is given. Exit status: 0 if every as-shipped test expected to
# pass passed (see EXPECTED below), else 1. Kills only what it starts.
set -uo pipefail

SRC=""
FTLD="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/daemon/ftld"
KEEP=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --libnbd-src) SRC="$2"; shift 2 ;;
    --ftld) FTLD="$2"; shift 2 ;;
    --keep) KEEP=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -n "$SRC" && -f "$SRC/interop/interop.c" ]] || { echo "--libnbd-src DIR: no interop/interop.c in '$SRC'" >&2; exit 2; }
[[ -x "$FTLD" ]] || { echo "no ftld at $FTLD (--ftld)" >&2; exit 2; }
[[ -f /usr/include/libnbd.h ]] || { echo "libnbd-dev is not installed" >&2; exit 2; }
FTLD="$(cd "$(dirname "$FTLD")" && pwd)/$(basename "$FTLD")"

W="$(mktemp -d /tmp/ftld-libnbd-interop.XXXXXX)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  if [[ $KEEP -eq 1 ]]; then echo "kept $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT
: > "$W/config.h"   # the tests include <config.h>; nothing in it is needed
POOL="$W/pool.img"
CFLAGS=(-std=gnu11 -O1 -I"$W" -I"$SRC/common/include" -I"$SRC/tests" -D_GNU_SOURCE)

# The pool the tests open (128 MiB file; its export is smaller: metadata and
# spare segments).
/usr/bin/python3 - "$FTLD" "$POOL" <<'EOF' || { echo "cannot create the pool" >&2; exit 1; }
import nbd, sys
h = nbd.NBD()
h.connect_command([sys.argv[1], "--stdin", "--log-level", "warn", "--size", "128M", sys.argv[2]])
print(h.get_size())
h.shutdown()
EOF
SIZE=$(/usr/bin/python3 -c "
import nbd,sys
h=nbd.NBD(); h.connect_command(['$FTLD','--stdin','--log-level','warn','$POOL']); print(h.get_size()); h.shutdown()")
echo "ftld pool: $POOL, export size $SIZE"

# --exit-with-parent: a test that fails exits without nbd_close, which is
# what stops a socket-activated server.
STDIN_PARAMS="\"--stdin\", \"--log-level\", \"warn\", \"$POOL\""
SA_PARAMS="\"--no-control\", \"--exit-with-parent\", \"--log-level\", \"warn\", \"$POOL\""

SHARED_SERVER=0
declare -A RESULT
EXPECTED=()  # as-shipped tests that should pass
build() {  # NAME SOURCE DEFINES...
  local name="$1" src="$2"; shift 2
  if ! cc "${CFLAGS[@]}" "$@" -o "$W/$name" "$src" -lnbd -lpthread > "$W/$name.build" 2>&1; then
    RESULT[$name]="FAIL (does not build: $(head -3 "$W/$name.build" | tr '\n' ' '))"
    return 1
  fi
}
run() {  # NAME ARGS...
  local name="$1"; shift
  [[ -n "${RESULT[$name]:-}" ]] && return
  # The previous test's ftld may still be closing the pool: wait for its
  # lock (not while the shared --unix server below holds it).
  [[ $SHARED_SERVER -eq 1 ]] || flock -w 60 "$POOL" true
  local t0=$SECONDS
  if (cd "$W" && timeout 120 "./$name" "$@" > "$W/$name.out" 2>&1); then
    RESULT[$name]="PASS ($((SECONDS - t0)) s)"
  else
    RESULT[$name]="FAIL ($((SECONDS - t0)) s): $(grep -v '^libnbd: debug' "$W/$name.out" | tail -2 | tr '\n' ' ')"
  fi
}
patched() {  # FILE FROM TO -> path of a copy with FROM replaced by TO
  local out="$W/$(basename "$1" .c)-patched.c"
  sed "s|$2|$3|" "$1" > "$out"
  echo "$out"
}

# interop/interop.c: connect, check the size, read 512 bytes, shut down.
for mode in stdin sa; do
  if [[ $mode == stdin ]]; then P="$STDIN_PARAMS"; D=(); else P="$SA_PARAMS"; D=(-DSOCKET_ACTIVATION=1); fi
  build "interop-ftld-$mode" "$SRC/interop/interop.c" -DSERVER="\"$FTLD\"" -DSERVER_PARAMS="$P" "${D[@]}" &&
    run "interop-ftld-$mode"
  src=$(patched "$SRC/interop/interop.c" '#define SIZE (1024\*1024)' "#define SIZE $SIZE")
  build "interop-ftld-$mode-size-patched" "$src" -DSERVER="\"$FTLD\"" -DSERVER_PARAMS="$P" "${D[@]}" &&
    run "interop-ftld-$mode-size-patched"
  EXPECTED+=("interop-ftld-$mode-size-patched")
done

# interop/socket-activation.c: the same through nbd_connect_systemd_socket_activation.
build socket-activation-ftld "$SRC/interop/socket-activation.c" -DSERVER="\"$FTLD\"" \
  -DSERVER_PARAMS="$SA_PARAMS" && run socket-activation-ftld
src=$(patched "$SRC/interop/socket-activation.c" '#define SIZE 1048576' "#define SIZE $SIZE")
build socket-activation-ftld-size-patched "$src" -DSERVER="\"$FTLD\"" -DSERVER_PARAMS="$SA_PARAMS" &&
  run socket-activation-ftld-size-patched
EXPECTED+=(socket-activation-ftld-size-patched)

# interop/list-exports.c: NBD_OPT_LIST names and descriptions, both ways of starting.
for mode in stdin sa; do
  if [[ $mode == stdin ]]; then P="$STDIN_PARAMS"; D=(); else P="$SA_PARAMS"; D=(-DSOCKET_ACTIVATION=1); fi
  build "list-exports-ftld-$mode" "$SRC/interop/list-exports.c" -DSERVER="\"$FTLD\"" -DSERVER_PARAMS="$P" \
    -DEXPORTS='"", "ftl0"' -DDESCRIPTIONS='"ftld volume ftl0 (default)", "ftld volume ftl0"' "${D[@]}" &&
    run "list-exports-ftld-$mode"
  EXPECTED+=("list-exports-ftld-$mode")
done

# tests/connect-systemd-socket-activation.c: connect and read the URI back.
src=$(patched "$SRC/tests/connect-systemd-socket-activation.c" \
  'char \*args\[\] = {"nbdkit", "-f", "memory", "size=1m", NULL};' \
  "char *args[] = {\"$FTLD\", \"--no-control\", \"--exit-with-parent\", \"--log-level\", \"warn\", \"$POOL\", NULL};")
sed -i 's|requires ("nbdkit.*|/* requires nbdkit: not with ftld */|' "$src"
build connect-systemd-socket-activation-ftld "$src" "$SRC/tests/requires.c" &&
  run connect-systemd-socket-activation-ftld
EXPECTED+=(connect-systemd-socket-activation-ftld)

# tests/synch-parallel.c, aio-parallel.c, aio-parallel-load.c: threads and
# connections writing, reading and comparing against a model of the export
# (nbdkit pattern + cow filter in libnbd's scripts; here ftld, prefilled
# with the same pattern by nbdcopy from nbdkit's pattern plugin).
start_unix() {  # -> $SOCK, ftld in the background
  SOCK="$W/nbd.sock"
  flock -w 60 "$POOL" true
  "$FTLD" --no-control --log-level warn --unix "$SOCK" "$POOL" 2> "$W/ftld-unix.log" &
  PIDS+=($!)
  for _ in $(seq 100); do [[ -S "$SOCK" ]] && break; sleep 0.1; done
}
stop_unix() {
  local p="${PIDS[-1]}"; kill "$p"; wait "$p" 2>/dev/null; unset 'PIDS[-1]'
}
prefill() {  # BYTES
  nbdcopy -- [ nbdkit pattern size="$1" ] "nbd+unix:///?socket=$SOCK" 2>> "$W/prefill.log"
}
start_unix
SHARED_SERVER=1
for t in synch-parallel aio-parallel aio-parallel-load; do
  prefill 64M  # each test's model starts from the pattern
  build "$t-ftld" "$SRC/tests/$t.c" && run "$t-ftld" "$SOCK"
  # They assert that the export is exactly as large as the region they use
  # (8 or 64 MiB); ftld's is larger. And they read and write at any byte
  # offset, which ftld serves only to a client that did not ask for block
  # sizes (libnbd asks by default; ftld then requires 512-byte alignment).
  # The copy asserts "at least" and does not ask.
  src=$(patched "$SRC/tests/$t.c" 'assert (nbd_get_size (nbd) == EXPORTSIZE)' \
    'assert (nbd_get_size (nbd) >= EXPORTSIZE)')
  sed -i 's|  nbd = nbd_create ();|  nbd = nbd_create (); if (nbd) nbd_set_request_block_size (nbd, false);|' "$src"
  prefill 64M
  build "$t-ftld-size-patched" "$src" && run "$t-ftld-size-patched" "$SOCK"
  EXPECTED+=("$t-ftld-size-patched")
done
stop_unix
SHARED_SERVER=0

echo
fail=0
for name in $(printf '%s\n' "${!RESULT[@]}" | sort); do
  printf '%-45s %s\n' "$name" "${RESULT[$name]}"
done
for name in "${EXPECTED[@]}"; do
  [[ "${RESULT[$name]:-}" == PASS* ]] || { echo "expected to pass: $name" >&2; fail=1; }
done
echo "load: $(uptime)"
exit $fail
