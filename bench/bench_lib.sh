# Shell helpers shared by the bench/*.sh scripts (sourced, not run).
# BENCH_NAME names the script in messages; PIDS holds daemons it started.

# A free TCP port on 127.0.0.1.
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# Waits (bounded, 20 s) until something serves NBD on 127.0.0.1:$1.
wait_port() {
  for _ in $(seq 1 400); do
    nbdinfo --size "nbd://127.0.0.1:$1/" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "${BENCH_NAME:-bench}: nothing serving NBD on port $1" >&2; return 1
}
# The 1-minute load average.
load() { cut -d' ' -f1 /proc/loadavg; }
# Stops every PID in PIDS (SIGTERM, then waits for it).
stop_all() {
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]+"${PIDS[@]}"}"; do wait "$p" 2>/dev/null || true; done
}
