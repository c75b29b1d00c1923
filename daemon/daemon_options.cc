#include "daemon/daemon_options.h"

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "control/control_protocol.h"
#include "ftl/kv.h"
#include "ftl/size.h"

namespace ftl::daemon {
namespace {

absl::Status Bad(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

// --metrics: "PORT", "ADDR:PORT" or "[V6ADDR]:PORT"; the address defaults
// to 127.0.0.1. The address is checked when bound.
absl::Status ParseMetrics(const std::string& v, DaemonOptions* o) {
  std::string host = "127.0.0.1", port = v;
  if (!v.empty() && v[0] == '[') {
    size_t close = v.find(']');
    if (close == std::string::npos || close + 1 >= v.size() || v[close + 1] != ':')
      return Bad(absl::StrCat("--metrics: bad address '", v, "' (ADDR:PORT, [V6ADDR]:PORT or PORT)"));
    host = v.substr(1, close - 1);
    port = v.substr(close + 2);
  } else if (size_t colon = v.rfind(':'); colon != std::string::npos) {
    host = v.substr(0, colon);
    port = v.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      return Bad(absl::StrCat("--metrics: write an IPv6 address in brackets: [", host, "]:", port));
  }
  uint32_t n = 0;
  if (host.empty() || !absl::SimpleAtoi(port, &n) || n > 65535)
    return Bad(absl::StrCat("--metrics: bad address '", v, "' (ADDR:PORT, [V6ADDR]:PORT or PORT)"));
  o->metrics_address = host;
  o->metrics_port = uint16_t(n);
  return absl::OkStatus();
}

}  // namespace

std::string DefaultControlPath(const std::string& backing) {
  std::string base = std::filesystem::path(backing).filename().string();
  if (base.empty()) base = "ftld";
  return absl::StrCat(control::kSocketDir, "/", base, control::kSocketSuffix);
}

absl::StatusOr<DaemonOptions> ParseDaemonArgs(const std::vector<std::string>& args) {
  DaemonOptions o;
  std::vector<std::string> positional;
  bool control_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    std::optional<std::string> inline_value;
    if (arg.starts_with("--") && arg.find('=') != std::string::npos) {
      inline_value = arg.substr(arg.find('=') + 1);
      arg = arg.substr(0, arg.find('='));
    }
    auto value = [&]() -> absl::StatusOr<std::string> {
      if (inline_value) return *inline_value;
      if (i + 1 >= args.size()) return Bad(absl::StrCat(arg, " needs a value"));
      return args[++i];
    };
    auto flag = [&](bool* out) -> absl::Status {
      if (inline_value) return Bad(absl::StrCat(arg, " takes no value"));
      *out = true;
      return absl::OkStatus();
    };
    absl::Status st;
    if (arg == "--size" || arg == "-s") {
      auto v = value();
      if (!v.ok()) return v.status();
      auto n = ParseSize(*v);
      if (!n.ok()) return Bad(absl::StrCat("--size: ", n.status().message()));
      if (*n == 0) return Bad("--size must be greater than zero");
      o.size = *n;
    } else if (arg == "--format") {
      st = flag(&o.format);
    } else if (arg == "--force") {
      st = flag(&o.force);
    } else if (arg == "--bind" || arg == "-b") {
      auto v = value();
      if (!v.ok()) return v.status();
      o.bind = *v;
      o.bind_given = true;
    } else if (arg == "--port" || arg == "-p") {
      auto v = value();
      if (!v.ok()) return v.status();
      uint32_t port = 0;
      if (!absl::SimpleAtoi(*v, &port) || port > 65535) {
        return Bad(absl::StrCat("--port: bad port '", *v, "'"));
      }
      o.port = uint16_t(port);
      o.port_given = true;
    } else if (arg == "--unix" || arg == "-k") {
      auto v = value();
      if (!v.ok()) return v.status();
      o.unix_path = *v;
    } else if (arg == "--export" || arg == "-x") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (v->empty()) return Bad("--export: the name must not be empty (\"\" is always exported)");
      if (v->size() > 4096) return Bad("--export: name longer than 4096 bytes");
      o.export_name = *v;
    } else if (arg == "--read-only" || arg == "-r") {
      st = flag(&o.read_only);
    } else if (arg == "--control") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (v->empty()) return Bad("--control: empty path");
      o.control = *v;
      control_given = true;
    } else if (arg == "--log-level") {
      auto v = value();
      if (!v.ok()) return v.status();
      static const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
      bool known = false;
      for (const char* l : kLevels) known |= *v == l;
      if (!known) {
        return Bad(absl::StrCat("--log-level: unknown level '", *v,
                                "' (trace, debug, info, warn, error, critical, off)"));
      }
      o.log_level = *v;
    } else if (arg == "--placement") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (*v != "auto" && *v != "on" && *v != "off")
        return Bad(absl::StrCat("--placement: unknown mode '", *v, "' (auto, on, off)"));
      o.placement = *v;
    } else if (arg == "--no-discard") {
      o.discard = false;
    } else if (arg == "--preallocate") {
      o.preallocate = true;
    } else if (arg == "--direct-io") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (!ParseDirectIo(*v, &o.direct_io))
        return Bad(absl::StrCat("--direct-io: unknown mode '", *v, "' (off, writes, on)"));
    } else if (arg == "--kv-buffer-pages") {
      auto v = value();
      if (!v.ok()) return v.status();
      uint32_t n = 0;
      if (!absl::SimpleAtoi(*v, &n) || n < 16 || n > (1u << 22)) {
        return Bad(absl::StrCat("--kv-buffer-pages: '", *v, "' is not a number of pages from 16 to ",
                                1u << 22));
      }
      o.kv_buffer_pages = n;
    } else if (arg == "--kv-mode") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (!ParseKvMode(*v)) {
        return Bad(absl::StrCat("--kv-mode: unknown mode '", *v, "' (pdl, ipl, ipl-merge, in-place)"));
      }
      o.kv_mode = *v;
    } else if (arg == "--kv-diff-mib") {
      auto v = value();
      if (!v.ok()) return v.status();
      uint32_t n = 0;
      if (!absl::SimpleAtoi(*v, &n) || n < 1 || n > (1u << 20)) {
        return Bad(absl::StrCat("--kv-diff-mib: '", *v, "' is not a number of MiB from 1 to ", 1u << 20));
      }
      o.kv_diff_mib = n;
    } else if (arg == "--kv-port") {
      auto v = value();
      if (!v.ok()) return v.status();
      uint32_t port = 0;
      if (!absl::SimpleAtoi(*v, &port) || port > 65535) {
        return Bad(absl::StrCat("--kv-port: bad port '", *v, "'"));
      }
      o.kv_port = uint16_t(port);
    } else if (arg == "--kv-bind") {
      auto v = value();
      if (!v.ok()) return v.status();
      o.kv_bind = *v;
      o.kv_bind_given = true;
    } else if (arg == "--kv-unix") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (v->empty()) return Bad("--kv-unix: empty path");
      o.kv_unix = *v;
    } else if (arg == "--kv-fsync") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (*v != "always" && *v != "everysec") {
        return Bad(absl::StrCat("--kv-fsync: unknown policy '", *v, "' (always, everysec)"));
      }
      o.kv_fsync = *v;
    } else if (arg == "--kv-databases") {
      auto v = value();
      if (!v.ok()) return v.status();
      uint32_t n = 0;
      if (!absl::SimpleAtoi(*v, &n) || n < 1 || n > 1024) {
        return Bad(absl::StrCat("--kv-databases: '", *v, "' is not a number from 1 to 1024"));
      }
      o.kv_databases = n;
    } else if (arg == "--simulate-volatile-cache") {
      // The seed only as --simulate-volatile-cache=SEED: a separate word
      // would be taken for BACKING.
      if (inline_value) {
        uint64_t seed = 0;
        if (!absl::SimpleAtoi(*inline_value, &seed)) {
          return Bad(absl::StrCat("--simulate-volatile-cache: bad seed '", *inline_value,
                                  "' (a number from 0 to 2^64-1)"));
        }
        o.volatile_cache_seed = seed;
      }
      o.simulate_volatile_cache = true;
    } else if (arg == "--accept-loss") {
      o.accept_loss = true;
    } else if (arg == "--proof-delay") {
      auto v = value();
      if (!v.ok()) return v.status();
      uint32_t ms = 0;
      if (!absl::SimpleAtoi(*v, &ms) || ms > 1000) {
        return Bad(absl::StrCat("--proof-delay: '", *v, "' is not a number of milliseconds from 0 to 1000"));
      }
      o.proof_delay_ms = ms;
    } else if (arg == "--sector-headers") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (*v != "on" && *v != "off") return Bad(absl::StrCat("--sector-headers: '", *v, "' is not on or off"));
      o.sector_headers = *v == "on";
    } else if (arg == "--mirror") {
      st = flag(&o.mirror);
    } else if (arg == "--resilver-rate") {
      auto v = value();
      if (!v.ok()) return v.status();
      auto n = ParseSize(*v);
      if (!n.ok()) return Bad(absl::StrCat("--resilver-rate: ", n.status().message()));
      o.resilver_rate = *n;
    } else if (arg == "--tls") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (*v != "off" && *v != "on" && *v != "require")
        return Bad(absl::StrCat("--tls: unknown mode '", *v, "' (off, on, require)"));
      o.tls = *v;
    } else if (arg == "--tls-certificates") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (v->empty()) return Bad("--tls-certificates: empty path");
      o.tls_certificates = *v;
    } else if (arg == "--tls-psk") {
      auto v = value();
      if (!v.ok()) return v.status();
      if (v->empty()) return Bad("--tls-psk: empty path");
      o.tls_psk = *v;
    } else if (arg == "--tls-verify-peer") {
      st = flag(&o.tls_verify_peer);
    } else if (arg == "--stdin") {
      st = flag(&o.stdin_mode);
    } else if (arg == "--no-control") {
      bool off = false;
      st = flag(&off);
      o.control_enabled = false;
    } else if (arg == "--exit-with-parent") {
      st = flag(&o.exit_with_parent);
    } else if (arg == "--metrics") {
      auto v = value();
      if (!v.ok()) return v.status();
      st = ParseMetrics(*v, &o);
    } else if (arg == "--help" || arg == "-h") {
      o.help = true;
    } else if (arg == "--version" || arg == "-V") {
      o.version = true;
    } else if (arg == "--") {
      for (++i; i < args.size(); ++i) positional.push_back(args[i]);
    } else if (arg.size() > 1 && arg[0] == '-') {
      return Bad(absl::StrCat("unknown option ", arg, " (see --help)"));
    } else {
      positional.push_back(arg);
    }
    if (!st.ok()) return st;
  }
  if (o.help || o.version) return o;
  if (positional.empty()) return Bad("missing BACKING (a file or block device; see --help)");
  if (positional.size() > 1 && !o.mirror)
    return Bad(absl::StrCat("unexpected argument '", positional[1],
                            "' (several BACKINGs make a mirror: add --mirror; striping is not built)"));
  if (positional.size() > 8) return Bad("a mirror has at most 8 devices");
  for (size_t i = 0; i < positional.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (positional[i] == positional[j]) return Bad(absl::StrCat("BACKING ", positional[i], " given twice"));
  o.backing = positional[0];
  o.backings = positional;
  if (o.force && !o.format) return Bad("--force only makes sense with --format");
  const bool have_creds = !o.tls_certificates.empty() || !o.tls_psk.empty();
  if (o.tls == "off" && (have_creds || o.tls_verify_peer))
    return Bad("--tls-certificates, --tls-psk and --tls-verify-peer need --tls=on or --tls=require");
  if (o.tls != "off" && !have_creds)
    return Bad(absl::StrCat("--tls=", o.tls, " needs --tls-certificates DIR or --tls-psk FILE"));
  if (!o.tls_certificates.empty() && !o.tls_psk.empty())
    return Bad("--tls-certificates and --tls-psk: choose one");
  if (o.tls_verify_peer && o.tls_certificates.empty())
    return Bad("--tls-verify-peer needs --tls-certificates (client certificates are X.509)");
  if (o.stdin_mode && o.listener_given())
    return Bad("--stdin serves the one client on standard input: no --bind, --port or --unix");
  if (!o.control_enabled && control_given) return Bad("--no-control and --control exclude each other");
  // --stdin: one short-lived server per client; no control socket unless asked for.
  if (o.stdin_mode && !control_given) o.control_enabled = false;
  if (!control_given) o.control = DefaultControlPath(o.backing);
  return o;
}

std::string DaemonUsage() {
  return R"(usage: ftld [OPTIONS] BACKING
       ftld [OPTIONS] --mirror BACKING BACKING [BACKING...]

Serve the ftld flash translation layer on BACKING (a file or block device)
over NBD. Runs in the foreground and logs to stderr.

  -s, --size SIZE      create a missing BACKING file of SIZE (K/M/G/T) and format it
      --format         format an unformatted BACKING (destroys foreign data)
      --force          with --format: also overwrite an existing ftld pool
  -b, --bind ADDR      TCP address to listen on (default 127.0.0.1; any other
                       than loopback logs a warning: NBD has no authentication)
  -p, --port N         TCP port (default 10809; 0 picks a free one)
  -k, --unix PATH      listen on a Unix socket (TCP too only if --bind/--port given)
  -x, --export NAME    export the primary volume as NAME (default: its volume
                       name, "ftl0"); it is always exported as "" as well
  -r, --read-only      refuse writes on every export
      --control PATH   control socket (default /run/ftld/<BACKING basename>.sock)
      --log-level L    trace, debug, info (default), warn, error, critical, off
      --placement M    hot/cold placement of writes: auto (default: while it
                       pays), on, off
      --no-discard     never discard freed space on BACKING (no punch hole or
                       BLKDISCARD, at format or for freed segments)
      --preallocate    when ftld formats BACKING, write zeros over all of it
                       instead of discarding it (a file then has every block
                       allocated: synced writes do not wait for the file
                       system to allocate); a fully allocated backing file
                       is never hole-punched
      --direct-io M    how a backing file meets the page cache: off
                       (default: reads and writes through it; a FLUSH
                       writes it back), writes (the log's writes bypass it
                       with O_DIRECT, reads may be served from it: less CPU
                       per FLUSH, for databases), on (reads bypass it too).
                       Falls back to off where the file system has no
                       O_DIRECT. Durability is the same in every mode
      --accept-loss    open even if a log record that was acknowledged as
                       durable is damaged: the blocks it names answer EIO
                       (each loss is logged by volume and LBA)
      --proof-delay MS  a FLUSH is answered after one sync; the record that
                       lets recovery tell later damage to it from a torn
                       tail follows within MS (default 20); 0: before the
                       answer (a second sync per flush)
      --sector-headers on|off  small log records put their headers into
                       512-byte sectors of a shared header block where the
                       backing writes sectors (default on); off: a 4 KiB
                       header block per record
      --kv-buffer-pages N  pages each key-value store keeps in memory
                       (default 1024, at least 16)
      --kv-mode M      how key-value stores write pages: pdl (default:
                       page-differential logging), ipl (in-page logging),
                       ipl-merge (merge whole erase units), in-place
      --kv-diff-mib N  pdl: MiB of page differentials each key-value store
                       keeps in memory before merging pages (default 32)
      --kv-port N      serve key-value datasets over the Redis protocol (RESP2,
                       RESP3 after HELLO 3) on TCP port N (0 picks a free one;
                       logged)
      --kv-bind ADDR   address of that listener (default 127.0.0.1; RESP has
                       no authentication)
      --kv-unix PATH   serve the Redis protocol on a Unix socket (TCP too only
                       with --kv-port)
      --kv-fsync P     always (default): a write is answered once durable,
                       writes of all clients sharing each flush; everysec:
                       answered at once, flushed every second (a crash loses
                       up to about two seconds of writes)
      --kv-databases N  SELECT 0..N-1 are the datasets db0..db<N-1> (default
                       16), made on their first write; SELECT NAME picks any
                       key-value dataset, NAME@SNAP a snapshot (read-only)
      --simulate-volatile-cache[=SEED]
                       for power-cut tests only: keep writes in memory until
                       a flush writes them to BACKING (in an order shuffled
                       by SEED, default from the clock; logged), so kill -9
                       then loses what a power cut of a disk with a volatile
                       write cache would: unflushed writes, and tears the
                       flush in progress
      --mirror         the BACKINGs are one mirror (2 to 8 devices): every
                       write goes to each, reads to one, a block failing its
                       checksum is read from another and healed. New devices
                       get mirror labels and a pool (like one new BACKING);
                       a device that carries a label opens its mirror (with
                       devices missing it runs DEGRADED). `ftlctl device`
                       lists, offlines, onlines and replaces devices
      --resilver-rate R  copy rate of a resilver (default 512M per second;
                       0: unlimited)
      --tls MODE       TLS on the NBD listeners (NBD_OPT_STARTTLS): off
                       (default), on (clients may use it), require (every
                       option but STARTTLS and ABORT is refused until TLS)
      --tls-certificates DIR  X.509: DIR/server-cert.pem, DIR/server-key.pem,
                       DIR/ca-cert.pem (clients' CA; needed with
                       --tls-verify-peer), DIR/ca-crl.pem (optional)
      --tls-psk FILE   pre-shared keys in psktool's format (username:hexkey)
      --tls-verify-peer  X.509: clients must show a certificate signed by
                       DIR/ca-cert.pem
      --stdin          serve one NBD client on standard input (a socket, as
                       inetd and libnbd's nbd_connect_command pass it), then
                       close the pool and exit; no listeners, and no control
                       socket unless --control is given
      --no-control     no control socket (ftlctl cannot reach this ftld)
      --exit-with-parent  shut down cleanly (as on SIGTERM) when the process
                       that started ftld exits (for servers a program such as
                       a libnbd client started)
      --metrics [ADDR:]PORT  serve Prometheus metrics over HTTP at
                       http://ADDR:PORT/metrics (ADDR default 127.0.0.1; any
                       other than loopback logs a warning; PORT 0 picks one)
  -h, --help           this text
  -V, --version        version

SIGINT/SIGTERM: stop accepting, finish in-flight requests, checkpoint, exit 0.
A second signal exits at once (the next start recovers from the log).

Started with systemd socket activation (LISTEN_PID/LISTEN_FDS, as systemd's
ftld.socket and libnbd's `nbdinfo -- [ ftld ... ]` do), ftld serves on the
inherited sockets instead of --bind/--port/--unix.
)";
}

}  // namespace ftl::daemon
