#!/usr/bin/env bash
# Starts ftld in the foreground on a default backing file, building it first.
# On a fresh Debian 12 machine as root this installs what it needs.
#
#   tools/run-ftld.sh [extra ftld options...]
#
# Backing file: $FTLD_BACKING (default /var/lib/ftld/ftld.img), created
# sparse with $FTLD_SIZE (default 4G) and formatted on first run; later runs
# open (and, after a crash, recover) the same pool. Ctrl-C stops it cleanly.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
backing="${FTLD_BACKING:-/var/lib/ftld/ftld.img}"
size="${FTLD_SIZE:-4G}"
build_dir="${FTL_BUILD_DIR:-build}"

tools/install-packages.sh
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" --target ftld ftlctl ftl-tool

# The pool holds every volume's data: keep its directory and file private
# (ftld also creates a missing backing file with mode 0600).
umask 077
mkdir -p "$(dirname "$backing")"
cat <<MSG

ftld is starting on $backing (NBD on 127.0.0.1:10809, export "" and "ftl0").
Connect with any NBD client, for example:
  nbdinfo nbd://127.0.0.1:10809/
  nbd-client 127.0.0.1 10809 /dev/nbd0                 (kernel nbd module)
  nbdfuse /mnt/ftld/disk nbd://127.0.0.1:10809/ &      (no nbd module: then
     losetup --find --show /mnt/ftld/disk              gives /dev/loopN)
  qemu-img info nbd://127.0.0.1:10809/ftl0
Operate it with: $build_dir/tools/ftlctl status   (stats, exports, checkpoint, gc)

MSG
exec "$build_dir/daemon/ftld" --size "$size" "$@" "$backing"
