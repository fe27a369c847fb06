// The peer's roles in the one-sided tests (one_sided_test.cc, multirail_test.cc):
//   window-target SIZE   registers a data buffer of SIZE bytes, 64 signal words and 8 atomic
//                        words; prints HANDLE, KEY (data), SIGKEY, ATOMKEY; accepts the test's
//                        communicator, opens a window over it, prints READY, then serves the
//                        commands below while it keeps driving progress
//   atomic-hammer T N    connects to a target's HANDLE (stdin), reads its ATOMKEY, and runs T
//                        threads of N fetch-adds of 1 on its word 0; prints SUM and COUNT
#include <atomic>
#include <cstring>
#include <iostream>
#include <sstream>
#include <thread>

#include "harness.hpp"
#include "signal_stream.hpp"
#include "xport/xport.hpp"

namespace xport::test {
namespace {

int fail(const std::string& why) {
  std::cout << "FAIL " << why << std::endl;
  return 1;
}

Deadline soon() { return Deadline::after(std::chrono::seconds(30)); }

// The next command, driving progress while none has come.
std::string next_command(Device& dev) {
  return next_stdin_line([&] { (void)dev.progress(); }, "bye");
}

struct Aligned {
  explicit Aligned(size_t n) : bytes(n + 64) {}
  uint8_t* data() {
    auto p = reinterpret_cast<uintptr_t>(bytes.data());
    return reinterpret_cast<uint8_t*>((p + 63) & ~uintptr_t{63});
  }
  std::vector<uint8_t> bytes;
};

int window_target(Device& dev, size_t size) {
  auto listener = dev.listen();
  if (!listener.ok()) return fail(listener.status().to_string());
  Aligned data(size), signals(64 * 8), atoms(8 * 8);
  std::memset(signals.data(), 0, 64 * 8);
  std::memset(atoms.data(), 0, 8 * 8);
  auto dreg = dev.register_memory(data.data(), size);
  auto sreg = dev.register_memory(signals.data(), 64 * 8);
  auto areg = dev.register_memory(atoms.data(), 8 * 8);
  if (!dreg.ok() || !sreg.ok() || !areg.ok()) return fail("register");
  std::cout << "HANDLE " << to_hex((*listener)->handle()) << std::endl;
  std::cout << "KEY " << to_hex(dreg->export_key()) << std::endl;
  std::cout << "SIGKEY " << to_hex(sreg->export_key()) << std::endl;
  std::cout << "ATOMKEY " << to_hex(areg->export_key()) << std::endl;
  auto comm = (*listener)->accept(soon());
  if (!comm.ok()) return fail("accept: " + comm.status().to_string());
  auto win = Window::open(**comm, soon());
  if (!win.ok()) return fail("window: " + win.status().to_string());
  std::vector<std::unique_ptr<RecvComm>> more;
  RemoteRegion ack;
  std::cout << "READY " << ((*win)->native_atomics() ? "native" : "emulated") << std::endl;
  auto* words = reinterpret_cast<uint64_t*>(signals.data());
  auto* atom_words = reinterpret_cast<uint64_t*>(atoms.data());
  for (;;) {
    std::istringstream cmd(next_command(dev));
    std::string op;
    cmd >> op;
    if (op == "bye" || op.empty()) return 0;
    if (op == "ACKKEY") {  // the test's ack word, for the signal stream
      std::string hex;
      cmd >> hex;
      auto k = dev.import_key(from_hex(hex));
      if (!k.ok()) return fail("ack key: " + k.status().to_string());
      ack = *k;
      std::cout << "OK" << std::endl;
    } else if (op == "STREAM") {  // STREAM SEED COUNT MAX SLOTS: the target side of the stream
      SignalStream s;
      cmd >> s.seed >> s.count >> s.max >> s.slots;
      if (s.buffer_bytes() > size) return fail("the stream does not fit the buffer");
      Status st = receive_signal_stream(**win, s, data.data(), *sreg, ack, std::chrono::seconds(30));
      if (!st.ok()) return fail("stream: " + st.to_string());
      std::cout << "OK " << s.count << std::endl;
    } else if (op == "CHECK") {  // CHECK SEED OFF LEN: the bytes are there now (no waiting)
      uint64_t seed = 0;
      size_t off = 0, len = 0;
      cmd >> seed >> off >> len;
      const long long bad = off + len <= size ? first_mismatch(data.data() + off, len, seed) : 0;
      if (bad >= 0) {
        std::cout << "BAD " << bad << std::endl;
      } else {
        std::cout << "OK" << std::endl;
      }
    } else if (op == "FILL") {  // FILL SEED OFF LEN
      uint64_t seed = 0;
      size_t off = 0, len = 0;
      cmd >> seed >> off >> len;
      if (off + len <= size) fill(data.data() + off, len, seed);
      std::cout << "OK" << std::endl;
    } else if (op == "READ" || op == "ATOM") {  // READ IDX: a signal word; ATOM IDX: an atomic one
      size_t i = 0;
      cmd >> i;
      uint64_t* w = op == "READ" ? &words[i % 64] : &atom_words[i % 8];
      std::cout << "VALUE " << std::atomic_ref<uint64_t>(*w).load() << std::endl;
    } else if (op == "SETATOM") {
      size_t i = 0;
      uint64_t v = 0;
      cmd >> i >> v;
      std::atomic_ref<uint64_t>(atom_words[i % 8]).store(v);
      std::cout << "OK" << std::endl;
    } else if (op == "WAIT") {  // WAIT IDX VALUE MS: wait_signal on this window
      size_t i = 0;
      uint64_t v = 0;
      int ms = 0;
      cmd >> i >> v >> ms;
      Status st = (*win)->wait_signal(*sreg, (i % 64) * 8, v,
                                      Deadline::after(std::chrono::milliseconds(ms)));
      std::cout << (st.ok() ? std::string("OK") : "ERR " + st.to_string()) << std::endl;
    } else if (op == "NOTES") {
      auto notes = (*win)->take_notifications();
      std::cout << "NOTES " << notes.size();
      for (const auto& n : notes) std::cout << " " << to_hex(n);
      std::cout << std::endl;
    } else if (op == "ACCEPT") {  // another communicator (an atomic-hammer's)
      auto c = (*listener)->accept(soon());
      if (!c.ok()) return fail("accept: " + c.status().to_string());
      more.push_back(std::move(c).value());
      std::cout << "OK" << std::endl;
    } else if (op == "STATS") {
      const Stats st = dev.stats();
      std::cout << "STATS signals " << st.signals_applied << " atomics " << st.atomics_applied
                << " notes " << st.notifications << " misses " << st.routing_misses << std::endl;
    } else {
      return fail("unknown command " + op);
    }
  }
}

int atomic_hammer(Device& dev, int threads, uint64_t n) {
  std::string line;
  if (!std::getline(std::cin, line) || line.rfind("HANDLE ", 0) != 0) return fail("no handle");
  const auto handle = from_hex(line.substr(7));
  if (!std::getline(std::cin, line) || line.rfind("ATOMKEY ", 0) != 0) return fail("no key");
  auto key = dev.import_key(from_hex(line.substr(8)));
  if (!key.ok()) return fail("key: " + key.status().to_string());
  auto comm = dev.connect(handle, soon());
  if (!comm.ok()) return fail("connect: " + comm.status().to_string());
  auto win = Window::open(**comm, soon());
  if (!win.ok()) return fail("window: " + win.status().to_string());
  std::cout << "GO" << std::endl;
  if (!std::getline(std::cin, line)) return fail("no go");
  std::atomic<uint64_t> sum{0}, count{0};
  std::atomic<bool> bad{false};
  std::string why;
  std::mutex why_mu;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      for (uint64_t k = 0; k < n && !bad; ++k) {
        uint64_t old = 0;
        auto tk = (*win)->atomic(AtomicOp::fetch_add, *key, 0, 1, 0, &old);
        Status st = tk.ok() ? (*win)->wait_local(*tk, soon()) : tk.status();
        if (st.code() == Code::again) {  // every slot in flight: let others finish
          --k;
          (void)dev.progress();
          continue;
        }
        if (!st.ok()) {
          std::lock_guard<std::mutex> g(why_mu);
          why = st.to_string();
          bad = true;
          return;
        }
        sum += old;
        count += 1;
      }
    });
  }
  for (auto& t : ts) t.join();
  if (bad) return fail("fetch_add: " + why);
  Status q = (*win)->quiet(soon());
  if (!q.ok()) return fail("quiet: " + q.to_string());
  std::cout << "SUM " << sum << " COUNT " << count << std::endl;
  line = next_command(dev);
  return 0;
}

}  // namespace

int one_sided_peer(Device& dev, const std::vector<std::string>& args) {
  if (args.size() == 2 && args[0] == "window-target") return window_target(dev, std::stoul(args[1]));
  if (args.size() == 3 && args[0] == "atomic-hammer") {
    return atomic_hammer(dev, std::stoi(args[1]), std::stoull(args[2]));
  }
  return -1;  // not a one-sided role
}

}  // namespace xport::test
