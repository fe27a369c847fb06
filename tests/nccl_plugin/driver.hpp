// NCCL's side of the plugin table for the plugin tests and the plugin benchmark: loading
// libnccl-net-xport.so as NCCL does (dlopen, dlsym "ncclNetPlugin_v11", init with a logger),
// the logger that keeps what the plugin reports, and polling under a deadline.
#pragma once

#include <dlfcn.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../integration/harness.hpp"
#include "abi/gin_v11.h"
#include "abi/net_v11.h"

namespace xport::nccl_test {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// ---- NCCL's side of the table ----

inline std::mutex g_log_mu;
inline std::vector<std::string> g_log;

inline void logger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> l(g_log_mu);
  g_log.push_back(std::string(level == NCCL_LOG_WARN ? "WARN " : "INFO ") + buf);
  if (level == NCCL_LOG_WARN && std::getenv("XTEST_QUIET_WARN") == nullptr) {
    std::fprintf(stderr, "[nccl log] %s\n", buf);
  }
}

// The last WARN logged since `mark`, or "".
inline std::string warned_since(size_t mark) {
  std::lock_guard<std::mutex> l(g_log_mu);
  for (size_t i = g_log.size(); i > mark; --i) {
    if (g_log[i - 1].rfind("WARN ", 0) == 0) return g_log[i - 1];
  }
  return "";
}
inline size_t log_mark() {
  std::lock_guard<std::mutex> l(g_log_mu);
  return g_log.size();
}

struct Plugin {
  void* lib = nullptr;
  ncclNet_v11_t* net = nullptr;
  void* ctx = nullptr;
  ncclGin_v11_t* gin = nullptr;  // found by load(); gin_ctx by load_gin()
  void* gin_ctx = nullptr;
  std::string error;

  bool load() {
    const char* path = std::getenv("XTEST_NCCL_PLUGIN");
    if (path == nullptr) {
      error = "XTEST_NCCL_PLUGIN is not set (the path of libnccl-net-xport.so)";
      return false;
    }
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      error = std::string("dlopen: ") + dlerror();
      return false;
    }
    net = static_cast<ncclNet_v11_t*>(dlsym(lib, "ncclNetPlugin_v11"));
    if (net == nullptr) {
      error = "no ncclNetPlugin_v11 in the plugin";
      return false;
    }
    gin = static_cast<ncclGin_v11_t*>(dlsym(lib, "ncclGinPlugin_v11"));
    ncclNetCommConfig_v11_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
    ncclResult_t r = net->init(&ctx, 0x1234, &config, logger, nullptr);
    if (r != ncclSuccess) {
      error = "init returned " + std::to_string(r) + ": " + warned_since(0);
      return false;
    }
    return true;
  }
  // NCCL's order: the net table's init (load), then the GIN table's.
  bool load_gin() {
    if (!load()) return false;
    if (gin == nullptr) {
      error = "no ncclGinPlugin_v11 in the plugin";
      return false;
    }
    ncclResult_t r = gin->init(&gin_ctx, 0x1234, logger);
    if (r != ncclSuccess) {
      error = "GIN init returned " + std::to_string(r) + ": " + warned_since(0);
      return false;
    }
    return true;
  }
  void unload() {
    if (gin != nullptr && gin_ctx != nullptr) gin->finalize(gin_ctx);
    gin_ctx = nullptr;
    if (net != nullptr && ctx != nullptr) net->finalize(ctx);
    ctx = nullptr;
    // (not dlclosed: NCCL keeps its plugin loaded too)
  }
};

template <typename F>
bool poll_until(F&& f, std::chrono::seconds limit) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (f()) return true;
    std::this_thread::yield();  // (2 shared cores: the peer process needs them too)
  }
  return false;
}

inline std::string hex(const void* p, size_t n) {
  std::vector<uint8_t> v(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
  return xport::test::to_hex(v);
}

}  // namespace xport::nccl_test
