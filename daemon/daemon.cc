#include "daemon/daemon.h"

#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "control/control.h"
#include "control/control_commands.h"
#include "control/control_device.h"
#include "control/control_kv.h"
#include "control/control_range.h"
#include "control/control_snapshot.h"
#include "control/control_volume.h"
#include "daemon/activation.h"
#include "registry/kv_registry.h"
#include "daemon/backing.h"
#include "daemon/space_watch.h"
#include "ftl/kv.h"
#include "ftl/log.h"
#include "ftl/size.h"
#include "metrics/collector.h"
#include "metrics/metrics_server.h"
#include "nbd/errors.h"
#include "nbd/exports.h"
#include "nbd/server.h"
#include "nbd/tls_credentials.h"
#include "resp/server.h"

namespace ftl::daemon {

namespace asio = boost::asio;
using control::ControlDispatcher;
using control::ControlServer;
using control::DaemonContext;
using nbd::Export;
using nbd::ExportTable;
using nbd::Server;
using nbd::ServerOptions;
using nbd::StatusMessage;

namespace {

constexpr auto kDrainTimeout = std::chrono::seconds(30);

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "ftld: error: %s\n", std::string(StatusMessage(s)).c_str());
  return 1;
}

// An integer >= min from the environment, else fallback.
int EnvInt(const char* name, int fallback, int min = 1) {
  int v = 0;
  const char* s = std::getenv(name);
  return s != nullptr && absl::SimpleAtoi(s, &v) && v >= min ? v : fallback;
}

KvOptions KvStoreOptions(const DaemonOptions& o) {
  KvOptions k;
  k.buffer_pages = o.kv_buffer_pages;
  k.mode = ParseKvMode(o.kv_mode).value_or(KvMode::kPdl);
  k.background_flush = true;  // unsynced writes (--kv-fsync everysec) do not wait for their flushes
  k.diff_budget_bytes = uint64_t(o.kv_diff_mib) << 20;
  k.read_only = o.read_only;
  return k;
}

}  // namespace

absl::Status FillExports(Pool& pool, const DaemonOptions& o, ExportTable* exports) {
  Volume* primary = pool.PrimaryVolume();
  if (primary == nullptr) return absl::InternalError("the pool has no primary volume");
  std::string primary_name = o.export_name.value_or(primary->name());
  absl::Status s = exports->Add({.name = primary_name,
                                 .description = absl::StrCat("ftld volume ", primary->name()),
                                 .volume = primary,
                                 .read_only = o.read_only,
                                 .listed = true});
  if (!s.ok()) return s;
  s = exports->Add({.name = "",
                    .description = absl::StrCat("ftld volume ", primary->name(), " (default)"),
                    .volume = primary,
                    .read_only = o.read_only,
                    .listed = true});
  if (!s.ok()) return s;
  for (const std::string& name : pool.VolumeNames()) {
    Volume* v = pool.GetVolume(name);
    if (v == nullptr || v == primary) continue;
    // Key-value datasets are served by the control socket (ftlctl kv),
    // never as block devices (nbd/exports.h refuses them too).
    if (v->kind() != DatasetKind::kBlock) continue;
    // Volumes activated from snapshots come back after a restart under the
    // name they were activated as; their own read-only flag persists in the
    // pool (effective_read_only() adds it to --read-only).
    std::string origin = pool.VolumeOrigin(name);
    s = exports->Add({.name = name,
                      .description = origin.empty() ? absl::StrCat("ftld volume ", name)
                                                    : absl::StrCat("ftld snapshot ", origin),
                      .volume = v,
                      .read_only = o.read_only,
                      .listed = true});
    if (!s.ok()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "cannot export volume '", name, "': ", s.message(), " (choose another --export)"));
    }
  }
  return absl::OkStatus();
}

namespace {
// NBD without TLS has no authentication and no encryption: whoever reaches
// a TCP listener can read and overwrite every export. Warns unless `bind`
// is a loopback address (an unparsable one never gets here: Server::Listen
// refuses it) or TLS is required.
void WarnIfReachable(const std::string& bind, uint16_t port, bool tls_required) {
  boost::system::error_code ec;
  asio::ip::address addr = asio::ip::make_address(bind, ec);
  if (ec || addr.is_loopback() || tls_required) return;
  Logger("nbd")->warn(
      "NBD listens on {}:{}, not a loopback address, without --tls=require: NBD has no "
      "authentication and, without TLS, no encryption; anyone who can reach this port can "
      "read and overwrite every export. Use --bind 127.0.0.1, --unix or --tls=require "
      "unless the network is trusted",
      bind, port);
}

nbd::TlsMode ToTlsMode(const std::string& mode) {
  return mode == "require" ? nbd::TlsMode::kRequire
         : mode == "on"    ? nbd::TlsMode::kOn
                           : nbd::TlsMode::kOff;
}

// The metrics endpoint has no authentication either; what it shows (export
// and volume names, sizes, traffic) is for the local machine unless told.
void WarnIfMetricsReachable(const std::string& address, uint16_t port) {
  boost::system::error_code ec;
  asio::ip::address addr = asio::ip::make_address(address, ec);
  if (ec || addr.is_loopback()) return;
  Logger("metrics")->warn(
      "metrics on {}:{}, not a loopback address: the endpoint has no authentication, and "
      "anyone who can reach it sees every volume's and export's name, size and traffic. "
      "Use --metrics 127.0.0.1:{} unless the network is trusted",
      address, port, port);
}

// Waits for SIGINT/SIGTERM on a dedicated thread: the first sets `stop`,
// the second exits the process at once.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, nullptr);  // inherited by every later thread
    ::signal(SIGPIPE, SIG_IGN);
  }
  void Start(std::function<void(int)> on_first) {
    thread_ = std::thread([this, on_first = std::move(on_first)] {
      int sig = 0;
      sigwait(&set_, &sig);
      on_first(sig);
      sigwait(&set_, &sig);
      Logger("nbd")->warn("second signal ({}): exiting now without a checkpoint",
                                strsignal(sig));
      spdlog::apply_all([](std::shared_ptr<spdlog::logger> l) { l->flush(); });
      ::_exit(128 + sig);
    });
    thread_.detach();
  }

 private:
  sigset_t set_;
  std::thread thread_;
};

}  // namespace

int RunDaemon(const std::vector<std::string>& args) {
  auto parsed = ParseDaemonArgs(args);
  if (!parsed.ok()) return Fail(parsed.status()), 2;
  const DaemonOptions& o = *parsed;
  if (o.help) {
    std::cout << DaemonUsage();
    return 0;
  }
  if (o.version) {
    std::cout << "ftld " << kFtldVersion << "\n";
    return 0;
  }
  SetLogLevel(o.log_level);
  auto log = Logger("nbd");

  // Signals are blocked before any thread starts, so only the watcher sees them.
  SignalWatcher signals;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  signals.Start([&](int sig) {
    log->info("{}: shutting down (send again to exit at once)", strsignal(sig));
    std::lock_guard<std::mutex> l(mu);
    stop = true;
    cv.notify_all();
  });

  // Step: TLS credentials (before the backing: a bad file costs no open).
  std::shared_ptr<const nbd::TlsCredentials> tls;
  if (o.tls != "off") {
    auto creds = nbd::TlsCredentials::Load({.certificates_dir = o.tls_certificates,
                                            .psk_file = o.tls_psk,
                                            .verify_peer = o.tls_verify_peer});
    if (!creds.ok()) return Fail(creds.status());
    tls = std::move(*creds);
    log->info("TLS {}: {}", o.tls, tls->Describe());
  }

  if (o.exit_with_parent) {
    // The parent's death sends SIGTERM, which the watcher above takes as
    // the first signal: the normal clean shutdown.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() == 1) {
      log->warn("--exit-with-parent: the parent process is already gone");
      return 0;
    }
  }

  // Step: sockets given by whoever started us (daemon/activation.h).
  auto inherited = TakeInheritedSockets();
  if (!inherited.ok()) return Fail(inherited.status());
  const bool activated = !inherited->fds.empty();
  if (activated && o.stdin_mode)
    return Fail(absl::InvalidArgumentError("--stdin, but LISTEN_FDS passes listening sockets"));
  if (activated && o.listener_given()) {
    return Fail(absl::InvalidArgumentError(
        "started with socket activation (LISTEN_FDS): it serves the inherited sockets; "
        "--bind, --port and --unix do not apply"));
  }
  int stdin_fd = -1;
  if (o.stdin_mode) {
    auto fd = TakeStdinSocket();
    if (!fd.ok()) return Fail(fd.status());
    stdin_fd = *fd;
  }

  // Step: backing.
  auto backing = OpenBacking(o);
  if (!backing.ok()) return Fail(backing.status());
  Pool& pool = *backing->pool;
  const Geometry& g = pool.geometry();
  log->info("{}: {} ({}, {} segments of {}, {} logical)", o.backing, backing->report,
            backing->media->Describe(), g.segment_count,
            FormatSize(uint64_t(g.segment_blocks) * g.block_size),
            FormatSize(g.logical_blocks * g.block_size));

  // Step: exports.
  ExportTable exports;
  if (absl::Status s = FillExports(pool, o, &exports); !s.ok()) {
    (void)pool.Close();
    return Fail(s);
  }

  // Step: NBD listeners (own, inherited, or none with --stdin).
  ServerOptions so;
  so.bind = o.tcp_enabled() && !activated ? o.bind : "";
  so.port = o.port;
  so.unix_path = o.unix_path;
  so.listen_fds = inherited->fds;
  unsigned ncpu = std::max(1u, std::thread::hardware_concurrency());
  so.io_threads = EnvInt("FTLD_IO_THREADS", int(std::max(1u, ncpu / 2)));
  so.worker_threads = EnvInt("FTLD_WORKERS", int(std::max(2u, ncpu)));
  so.receive_poll = std::chrono::microseconds(EnvInt("FTLD_POLL_US", 50, 0));
  so.tls_mode = ToTlsMode(o.tls);
  so.tls = tls;
  std::unique_ptr<nbd::RequestMetrics> request_metrics;
  if (o.metrics_address) {
    request_metrics = std::make_unique<nbd::RequestMetrics>();
    so.metrics = request_metrics.get();
  }
  auto server = std::make_unique<Server>(&exports, so);
  if (!o.stdin_mode) {
    if (absl::Status s = server->Listen(); !s.ok()) {
      (void)pool.Close();
      return Fail(s);
    }
  }
  if (!so.bind.empty()) {
    WarnIfReachable(so.bind, server->tcp_port(), so.tls_mode == nbd::TlsMode::kRequire);
  }
  for (size_t i = 0; i < inherited->names.size(); ++i) {
    if (!inherited->names[i].empty())
      log->info("inherited fd {} is named '{}'", inherited->fds[i], inherited->names[i]);
  }

  // Step: control socket (and the key-value stores its commands open).
  registry::KvRegistry kv(&pool, KvStoreOptions(o));
  DaemonContext ctx;
  ctx.pool = &pool;
  ctx.server = server.get();
  ctx.exports = &exports;
  ctx.kv = &kv;
  ctx.mirror = backing->mirror.get();
  ctx.backing = o.backing;
  ctx.media = backing->media->Describe();
  ctx.open_report = backing->report;
  ctx.control_path = o.control;
  ctx.read_only = o.read_only;
  ctx.direct_io = o.direct_io;
  ControlDispatcher dispatcher;
  control::RegisterCoreCommands(&dispatcher, &ctx);
  control::RegisterSnapshotCommands(&dispatcher, &ctx);
  control::RegisterRangeCommands(&dispatcher, &ctx);
  control::RegisterKvCommands(&dispatcher, &ctx);
  control::RegisterDeviceCommands(&dispatcher, &ctx);
  control::RegisterVolumeCommands(&dispatcher, &ctx);
  std::unique_ptr<ControlServer> control;
  if (o.control_enabled) {
    control = std::make_unique<ControlServer>(server->io_context(), &dispatcher);
    if (absl::Status s = control->Listen(o.control); !s.ok()) {
      server.reset();
      (void)pool.Close();
      return Fail(s);
    }
  }

  // Step: metrics endpoint (metrics/metrics_server.h), off unless --metrics.
  std::unique_ptr<metrics::MetricsServer> metrics_server;
  if (o.metrics_address) {
    metrics::Sources sources{.pool = &pool,
                             .server = server.get(),
                             .requests = request_metrics.get(),
                             .started = std::chrono::system_clock::now(),
                             .version = kFtldVersion};
    metrics_server = std::make_unique<metrics::MetricsServer>(
        server->io_context(), server->workers().get_executor(),
        [sources] { return metrics::Collect(sources); });
    if (absl::Status s = metrics_server->Listen(*o.metrics_address, o.metrics_port); !s.ok()) {
      control.reset();
      server.reset();
      (void)pool.Close();
      return Fail(s);
    }
    WarnIfMetricsReachable(*o.metrics_address, metrics_server->port());
  }

  // Step: the Redis-protocol listener (on the same io threads and workers).
  std::unique_ptr<resp::Server> resp_server;
  if (o.resp_enabled()) {
    resp::ServerOptions ro;
    ro.bind = o.resp_tcp_enabled() ? o.kv_bind : "";
    ro.port = o.kv_port.value_or(6379);
    ro.unix_path = o.kv_unix;
    ro.fsync = o.kv_fsync == "everysec" ? resp::Fsync::kEverysec : resp::Fsync::kAlways;
    ro.databases = o.kv_databases;
    ro.read_only = o.read_only;
    resp_server = std::make_unique<resp::Server>(server->io_context(),
                                                 server->workers().get_executor(), &kv, ro);
    if (absl::Status s = resp_server->Listen(); !s.ok()) {
      if (control) control->Stop();
      control.reset();
      metrics_server.reset();
      resp_server.reset();  // before the io_context its listeners are on
      server.reset();
      (void)kv.CloseAll();
      (void)pool.Close();
      return Fail(s);
    }
    if (!ro.bind.empty()) {
      boost::system::error_code ec;
      asio::ip::address addr = asio::ip::make_address(ro.bind, ec);
      if (!ec && !addr.is_loopback()) {
        Logger("resp")->warn(
            "RESP listens on {}:{}, not a loopback address: it has no authentication; anyone "
            "who can reach this port can read and overwrite every key-value dataset",
            ro.bind, resp_server->tcp_port());
      }
    }
  }

  // Step: serve.
  if (stdin_fd >= 0) {
    // --stdin: the one client's end is the daemon's end.
    absl::Status s = server->AddClient(stdin_fd, [&] {
      log->info("the client on standard input is gone: shutting down");
      std::lock_guard<std::mutex> l(mu);
      stop = true;
      cv.notify_all();
    });
    if (!s.ok()) {
      control.reset();
      metrics_server.reset();
      resp_server.reset();  // before the io_context its listeners are on
      server.reset();
      (void)kv.CloseAll();
      (void)pool.Close();
      return Fail(s);
    }
  }
  server->Start();
  if (control) control->Start();
  if (metrics_server) metrics_server->Start();
  // Pool-use warnings at 80/90/95% (thin provisioning: daemon/space_watch.h).
  SpaceMonitor space(&pool, std::chrono::seconds(1));
  if (resp_server) resp_server->Start();
  for (const Export& e : exports.List()) {
    if (e.listed) {
      log->info("export '{}': volume {} ({}){}", e.name, e.volume->name(),
                FormatSize(e.volume->size_bytes()),
                e.effective_read_only() ? ", read-only" : "");
    }
  }
  if (o.stdin_mode) {
    log->info("ready: serving the client on standard input");
  } else if (activated) {
    log->info("ready: {} inherited socket(s)", inherited->fds.size());
  } else if (!so.bind.empty()) {
    log->info("ready: {}://{}:{}/ (also /{})",
              so.tls_mode == nbd::TlsMode::kRequire ? "nbds" : "nbd", so.bind, server->tcp_port(),
              o.export_name.value_or(pool.PrimaryVolume()->name()));
  } else {
    log->info("ready: {}+unix:///?socket={}",
              so.tls_mode == nbd::TlsMode::kRequire ? "nbds" : "nbd", so.unix_path);
  }
  {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return stop; });
  }

  // Shutdown steps.
  space.Stop();
  if (metrics_server) metrics_server->Stop();
  if (control) control->Stop();
  if (resp_server) resp_server->Stop();
  size_t left = server->Shutdown(kDrainTimeout);
  if (left > 0) log->warn("{} client(s) did not finish in time; closing them", left);
  server->Join();
  control.reset();
  metrics_server.reset();
  // Before the io_context goes (server.reset()): its listeners and timer
  // are on it; RESP connections still queued there keep their own state.
  resp_server.reset();
  // The stores flush what they hold (unsynced puts) before the pool closes.
  absl::Status kv_closed = kv.CloseAll();
  log->info("writing checkpoint and closing the pool");
  absl::Status closed = pool.Close();
  server.reset();
  // A resilver in progress starts over at the next start.
  if (backing->mirror) backing->mirror->Shutdown();
  if (!closed.ok()) {
    log->error("closing the pool failed: {}", closed.ToString());
    return 1;
  }
  if (!kv_closed.ok()) {
    log->error("closing a key-value store failed (its unsynced writes may be lost): {}",
               kv_closed.ToString());
    return 1;
  }
  log->info("clean shutdown");
  return 0;
}

}  // namespace ftl::daemon
