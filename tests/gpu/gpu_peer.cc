// The other process of the two-process GPU tests (tests/gpu/two_process_gpu_test.cc): GPU
// memory (XPORT_TEST_GPU_DST, default 0; the stand-in driver when XTEST_FAKE_GPU=1) a parent
// sends, puts and signals into; every check reads the bytes back from GPU memory.
//   HANDLE/DATA/SIG lines out, then commands on stdin:
//   recv OFF LEN SEED              a message into data+OFF, checked
//   wait WORD VALUE OFF LEN SEED   until signal word WORD >= VALUE, then data[OFF, +LEN) checked
//   bye
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "../integration/harness.hpp"
#include "../unit/gpu/fake_driver.hpp"
#include "gpu/driver.hpp"
#include "xport/xport.hpp"

namespace {

using namespace xport;

int fail(const std::string& why) {
  std::cout << "FAIL " << why << std::endl;
  return 1;
}

Deadline soon() { return Deadline::after(std::chrono::seconds(30)); }

// Bytes of GPU memory, read through a stream of the driver.
Result<std::vector<uint8_t>> read_gpu(const uint8_t* p, size_t n) {
  gpu::Driver& d = gpu::driver();
  XPORT_ASSIGN_OR_RETURN(auto info, d.classify(p));
  XPORT_ASSIGN_OR_RETURN(auto s, d.open_copy_queue(info));
  std::vector<uint8_t> out(n);
  XPORT_RETURN_IF_ERROR(s->copy_to_host(out.data(), p, n));
  XPORT_RETURN_IF_ERROR(s->synchronize());
  return out;
}

std::string check(const uint8_t* gpu, size_t off, size_t len, uint64_t seed) {
  auto got = read_gpu(gpu + off, len);
  if (!got.ok()) return "reading GPU memory: " + got.status().to_string();
  long long bad = test::first_mismatch(got->data(), len, seed);
  if (bad >= 0) return "GPU byte " + std::to_string(off + bad) + " differs (seed " + std::to_string(seed) + ")";
  return "";
}

int run(Device& dev) {
  gpu::Driver& d = gpu::driver();
  const char* g = std::getenv("XPORT_TEST_GPU_DST");
  const int gpu_index = g ? std::atoi(g) : 0;
  constexpr size_t kData = 16 << 20, kSig = 4096;
  auto data = d.alloc_gpu(kData, gpu_index);
  auto sig = d.alloc_gpu(kSig, gpu_index);
  if (!data.ok() || !sig.ok()) return fail("cudaMalloc on GPU " + std::to_string(gpu_index));
  {
    std::vector<uint8_t> zero(kData, 0);
    auto s = d.open_copy_queue(*d.classify(*data));
    if (!s.ok() || !(*s)->copy_to_gpu(*data, zero.data(), kData).ok() ||
        !(*s)->copy_to_gpu(*sig, zero.data(), kSig).ok() || !(*s)->synchronize().ok()) {
      return fail("zeroing GPU memory");
    }
  }
  auto* gdata = static_cast<uint8_t*>(*data);
  auto* gsig = static_cast<uint8_t*>(*sig);
  auto rdata = dev.register_memory(gdata, kData);
  auto rsig = dev.register_memory(gsig, kSig);
  if (!rdata.ok() || !rsig.ok()) return fail("register GPU memory");
  if (!rdata->staged() && !rsig->staged()) return fail("GPU memory was not staged");
  auto listener = dev.listen();
  if (!listener.ok()) return fail(listener.status().to_string());
  std::cout << "HANDLE " << test::to_hex((*listener)->handle()) << std::endl;
  std::cout << "DATA " << test::to_hex(rdata->export_key()) << std::endl;
  std::cout << "SIG " << test::to_hex(rsig->export_key()) << std::endl;
  auto comm = (*listener)->accept(soon());
  if (!comm.ok()) return fail("accept: " + comm.status().to_string());
  for (;;) {
    std::istringstream in(test::next_stdin_line([&] { (void)dev.progress(); }, "bye"));
    std::string cmd;
    in >> cmd;
    if (cmd == "bye") return 0;
    if (cmd == "recv") {
      size_t off = 0, len = 0;
      uint64_t seed = 0;
      in >> off >> len >> seed;
      auto r = (*comm)->irecv(gdata + off, len, *rdata);
      if (!r.ok()) return fail("irecv: " + r.status().to_string());
      auto got = (*comm)->wait(*r, soon());
      if (!got.ok()) return fail("receive: " + got.status().to_string());
      if (*got != len) return fail("received " + std::to_string(*got) + " bytes of " + std::to_string(len));
      std::string bad = check(gdata, off, len, seed);
      std::cout << (bad.empty() ? "OK" : "FAIL " + bad) << std::endl;
    } else if (cmd == "wait") {
      size_t word = 0, off = 0, len = 0;
      uint64_t value = 0, seed = 0;
      in >> word >> value >> off >> len >> seed;
      uint64_t seen = 0;
      const Deadline dl = soon();
      while (seen < value && !dl.expired()) {
        (void)dev.progress();
        auto w = read_gpu(gsig + word * 8, 8);
        if (!w.ok()) return fail("reading the GPU signal word: " + w.status().to_string());
        std::memcpy(&seen, w->data(), 8);
      }
      if (seen < value) {
        std::cout << "FAIL signal word " << word << " is " << seen << " in GPU memory, not " << value << std::endl;
        continue;
      }
      std::string bad = len ? check(gdata, off, len, seed) : "";
      std::cout << (bad.empty() ? "OK " + std::to_string(seen) : "FAIL " + bad) << std::endl;
    } else {
      return fail("unknown command '" + cmd + "'");
    }
  }
}

}  // namespace

int main() {
  std::unique_ptr<test::FakeGpuScope> fake;
  if (const char* f = std::getenv("XTEST_FAKE_GPU"); f != nullptr && std::string(f) == "1") {
    fake = std::make_unique<test::FakeGpuScope>();
  }
  if (!xport::gpu::driver().available()) return fail("no GPU: " + xport::gpu::driver().describe());
  ContextOptions opts;
  opts.peers_on_host = true;
  auto ctx = Context::open(opts);
  if (!ctx.ok()) return fail(ctx.status().to_string());
  auto dev = (*ctx)->open_device();
  if (!dev.ok()) return fail(dev.status().to_string());
  return run(**dev);
}
