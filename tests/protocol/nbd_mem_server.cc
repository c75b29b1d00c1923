// nbd_mem_server: the NBD server over in-memory TestVolumes, for trying the
// protocol layer with real clients without the engine.
//   nbd_mem_server PORT [SIZE_MIB]
// Exports "mem" (also as "") and "mem-ro" (read-only). Stops on SIGINT/TERM.

#include <csignal>
#include <cstdlib>
#include <iostream>

#include "ftl/log.h"
#include "nbd/server.h"
#include "nbd_test_volume.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: nbd_mem_server PORT [SIZE_MIB]\n";
    return 2;
  }
  if (const char* lvl = std::getenv("FTLD_LOG_LEVEL")) ftl::SetLogLevel(lvl);
  uint64_t size = (argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 64) << 20;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  ftl::nbd::testing::TestVolume rw("mem", size), ro("mem-ro", size, true);
  ftl::nbd::ExportTable exports;
  (void)exports.Add({.name = "mem", .description = "test volume", .volume = &rw});
  (void)exports.Add({.name = "", .description = "", .volume = &rw});
  (void)exports.Add({.name = "mem-ro", .description = "", .volume = &ro, .read_only = true});
  ftl::nbd::ServerOptions opts;
  opts.port = uint16_t(std::atoi(argv[1]));
  if (const char* v = std::getenv("IO_THREADS")) opts.io_threads = std::atoi(v);
  if (const char* v = std::getenv("WORKERS")) opts.worker_threads = std::atoi(v);
  ftl::nbd::Server server(&exports, opts);
  if (auto s = server.Listen(); !s.ok()) {
    std::cerr << s << "\n";
    return 1;
  }
  server.Start();
  std::cout << "port " << server.tcp_port() << std::endl;
  int sig = 0;
  sigwait(&set, &sig);
  server.Shutdown(std::chrono::seconds(10));
  server.Join();
  return 0;
}
