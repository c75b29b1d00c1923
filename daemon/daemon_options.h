#pragma once
// The ftld command line (the contract of issue 3):
//   ftld [--size SIZE] [--format [--force]] [--bind ADDR] [--port N]
//        [--unix PATH] [--export NAME] [--read-only] [--control PATH]
//        [--log-level LEVEL] [--placement auto|on|off] [--no-discard]
//        [--accept-loss] [--kv-buffer-pages N] [--kv-mode MODE] [--kv-diff-mib N]
//        [--preallocate] [--direct-io off|writes|on] [--proof-delay MS]
//        [--sector-headers on|off]
//        [--simulate-volatile-cache[=SEED]]
//        [--tls off|on|require] [--tls-certificates DIR | --tls-psk FILE]
//        [--tls-verify-peer]
//        [--kv-port N] [--kv-bind ADDR] [--kv-unix PATH] [--kv-fsync always|everysec]
//        [--kv-databases N] [--stdin] [--no-control] [--exit-with-parent]
//        [--metrics [ADDR:]PORT] [--mirror] [--resilver-rate SIZE] BACKING [BACKING...]
// Short forms as in qemu-nbd where they exist: -b ADDR, -p N, -k PATH,
// -x NAME, -r; also -s SIZE, -h, -V. "--opt=value" works too.
// Parsing is pure (no file system access) so it is unit tested.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ftl/media.h"

namespace ftl::daemon {

struct DaemonOptions {
  std::string backing;                // the first BACKING (names the control socket)
  std::vector<std::string> backings;  // all of them: more than one only with --mirror
  // A mirror of the BACKINGs (include/ftl/mirror.h); also implied when a
  // BACKING carries a mirror label.
  bool mirror = false;
  uint64_t resilver_rate = 512ull << 20;  // MirrorOptions::resilver_bytes_per_sec (--resilver-rate)
  std::optional<uint64_t> size;  // create a missing BACKING with this size
  bool format = false;
  bool force = false;
  std::string bind = "127.0.0.1";
  bool bind_given = false;
  uint16_t port = 10809;
  bool port_given = false;
  std::string unix_path;                   // also/instead listen here
  std::optional<std::string> export_name;  // default: the primary volume's name
  bool read_only = false;
  std::string control;  // default: DefaultControlPath(backing)
  std::string log_level = "info";
  std::string placement = "auto";  // OpenOptions::placement
  bool discard = true;             // OpenOptions::discard (--no-discard)
  bool preallocate = false;        // FormatOptions::preallocate (--preallocate)
  DirectIo direct_io = DirectIo::kOff;  // OpenFileMedia's mode for backing files (--direct-io)
  bool accept_loss = false;        // OpenOptions::accept_loss (--accept-loss)
  uint32_t proof_delay_ms = 20;    // OpenOptions::proof_delay (--proof-delay)
  bool sector_headers = true;      // OpenOptions::sector_headers (--sector-headers)
  uint32_t kv_buffer_pages = 1024; // KvOptions::buffer_pages of every key-value store
  std::string kv_mode = "pdl";     // KvOptions::mode: pdl, ipl, ipl-merge, in-place
  uint32_t kv_diff_mib = 32;       // KvOptions::diff_budget_bytes in MiB
  // The Redis-protocol server (resp/server.h): on when a port or a Unix
  // socket is given; TCP only with a port (or --kv-bind).
  std::optional<uint16_t> kv_port;
  std::string kv_bind = "127.0.0.1";
  bool kv_bind_given = false;
  std::string kv_unix;
  std::string kv_fsync = "always";  // always | everysec
  uint32_t kv_databases = 16;       // SELECT 0 .. N-1
  // Power-cut tests: the backing behind NewVolatileCacheMedia (include/ftl/media.h),
  // so that kill -9 loses what a power cut would. The seed orders the
  // write-throughs; none given: one from the clock and the pid (logged).
  bool simulate_volatile_cache = false;
  std::optional<uint64_t> volatile_cache_seed;
  // TLS (nbd/options.h TlsMode, nbd/tls_credentials.h): "off", "on" or
  // "require"; on/require need exactly one of the two credentials.
  std::string tls = "off";
  std::string tls_certificates;  // --tls-certificates DIR (X.509)
  std::string tls_psk;           // --tls-psk FILE (psktool's format)
  bool tls_verify_peer = false;  // --tls-verify-peer (X.509 client certificates)
  // Issue 24 (docs/decisions.md, "Issue 24: activation and metrics"):
  // serve one client on standard input, then exit (daemon/activation.h).
  bool stdin_mode = false;
  // The control socket: off with --no-control, and with --stdin unless
  // --control was given.
  bool control_enabled = true;
  // SIGTERM (a clean shutdown) when the parent process exits, as nbdkit's
  // --exit-with-parent: for servers a client program started.
  bool exit_with_parent = false;
  // --metrics: the Prometheus endpoint's address (metrics/metrics_server.h).
  std::optional<std::string> metrics_address;  // none: no endpoint
  uint16_t metrics_port = 0;
  bool help = false;
  bool version = false;

  // TCP is off when only --unix was given, and with --stdin.
  bool tcp_enabled() const {
    return !stdin_mode && (unix_path.empty() || bind_given || port_given);
  }
  // Any of --bind, --port, --unix (refused with --stdin and with inherited
  // sockets).
  bool listener_given() const { return bind_given || port_given || !unix_path.empty(); }
  bool resp_enabled() const { return kv_port.has_value() || !kv_unix.empty() || kv_bind_given; }
  bool resp_tcp_enabled() const { return kv_port.has_value() || kv_bind_given; }
};

// InvalidArgument with a one-line message for anything wrong.
absl::StatusOr<DaemonOptions> ParseDaemonArgs(const std::vector<std::string>& args);

// /run/ftld/<basename of backing>.sock (control/control_protocol.h)
std::string DefaultControlPath(const std::string& backing);

std::string DaemonUsage();
inline constexpr const char* kFtldVersion = "0.1.0";

}  // namespace ftl::daemon
