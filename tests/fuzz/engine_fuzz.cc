// Fuzzes the engine's message and completion handlers: arbitrary headers, bodies and remote CQ
// data handed to a live engine (shm, connected to itself, receives posted) where progress would
// hand over what arrived. Nothing may crash, leak or reach a request it does not name.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>

#include "fabric/provider.hpp"
#include "proto/engine.hpp"

namespace {

using namespace xport;
using namespace xport::proto;

struct Setup {
  std::shared_ptr<Engine> engine;
  CommId send, recv;
  std::vector<uint8_t> mem = std::vector<uint8_t>(1 << 20);
  RegionRef region;
  std::deque<uint64_t> posted;

  static Setup* make() {
    auto* s = new Setup();
    fabric::ProviderRequest req;
    req.provider = "shm";
    req.peers_on_host = true;
    auto sel = fabric::select_provider(req);
    if (!sel) __builtin_trap();
    EngineConfig cfg;
    cfg.max_requests = 8;
    cfg.eager_max = 4096;
    auto e = Engine::open({sel->info.get()}, sel->report.caps, cfg);
    if (!e) __builtin_trap();
    s->engine = std::move(e).value();
    auto l = s->engine->connections().listen();
    auto c = s->engine->connections().connect(l->handle, Deadline::after(std::chrono::seconds(10)));
    auto a = s->engine->connections().accept(l->token, Deadline::after(std::chrono::seconds(10)));
    if (!c || !a) __builtin_trap();
    s->send = *c;
    s->recv = *a;
    s->region = *s->engine->memory().register_memory(s->mem.data(), s->mem.size());
    return s;
  }

  // Keeps receives posted (large ones get a CTS, so writes have somewhere to land).
  void top_up() {
    LocalBuffer lb{&region, mem.data(), mem.size()};
    while (posted.size() < 8) {
      const size_t i = posted.size();
      auto r = engine->two_sided().irecv(recv, mem.data() + i * 65536, i % 2 ? 65536 : 512, lb);
      if (!r) break;
      posted.push_back(*r);
    }
    for (size_t n = posted.size(); n > 0; --n) {
      auto t = engine->two_sided().test(recv, posted.front());
      const uint64_t seq = posted.front();
      posted.pop_front();
      if (t && !t->done) posted.push_back(seq);
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Setup* s = Setup::make();
  if (size < 1) return 0;
  s->top_up();
  const uint8_t mode = data[0] % 3;
  data += 1;
  size -= 1;
  if (mode == 0) {
    s->engine->inject_message(0, data, size);
  } else if (size >= 8) {
    uint64_t d;
    std::memcpy(&d, data, 8);
    s->engine->inject_cq_data(0, d, data + 8, size - 8, mode == 2);
  }
  (void)s->engine->progress();
  return 0;
}
