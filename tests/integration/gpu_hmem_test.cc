// GPU memory registered by the provider itself (FI_HMEM_CUDA), through the strict provider
// advertising FI_HMEM + FI_MR_HMEM (STRICT_FI_HMEM=1) with the fake CUDA driver standing in for a
// GPU: which path XPORT_GPU_MEMORY and the provider choose, and that bytes move through GPU
// regions with every buffer's descriptor and no inject from GPU memory (the strict provider
// refuses both and counts them).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../unit/gpu/fake_driver.hpp"
#include "core/knob.hpp"
#include "harness.hpp"
#include "provider_fixture.hpp"

namespace xport {
namespace {

using namespace std::chrono_literals;
using test::Pair;

Deadline soon() { return Deadline::after(20s); }

// The strict provider's FI_HMEM counts (tests/strict_provider/config.cc), read from the copy
// libfabric loaded into this process.
struct HmemTotals {
  uint64_t registrations = 0, refused = 0, op_rejects = 0;
};
HmemTotals strict_totals() {
  HmemTotals t;
  const char* dir = std::getenv("FI_PROVIDER_PATH");
  if (dir == nullptr) return t;
  void* h = dlopen((std::string(dir) + "/libstrict-fi.so").c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return t;
  using Fn = void (*)(uint64_t*);
  auto fn = reinterpret_cast<Fn>(dlsym(h, "strict_fi_hmem_totals"));
  if (fn != nullptr) {
    uint64_t v[3] = {};
    fn(v);
    t = {v[0], v[1], v[2]};
  }
  dlclose(h);
  return t;
}

// Sends the strict provider admitted with a payload in GPU memory under its FI_HMEM_CUDA
// descriptor (read by the provider, not copied by libxport's CPU into a bounce buffer).
uint64_t strict_hmem_sends() {
  const char* dir = std::getenv("FI_PROVIDER_PATH");
  if (dir == nullptr) return 0;
  void* h = dlopen((std::string(dir) + "/libstrict-fi.so").c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return 0;
  using Fn = uint64_t (*)();
  auto fn = reinterpret_cast<Fn>(dlsym(h, "strict_fi_hmem_sends"));
  const uint64_t n = fn != nullptr ? fn() : 0;
  dlclose(h);
  return n;
}

// Parameter: the strict provider's base.
class GpuHmem : public ::testing::TestWithParam<const char*> {
 protected:
  // Opens the Context and Device over the strict provider with FI_HMEM offered or not and
  // XPORT_GPU_MEMORY=`mode`; the Context's status when it fails.
  Status open(bool strict_hmem, const char* mode) {
    setenv("XPORT_PROVIDER", "strict", 1);
    setenv("XPORT_GPU_MEMORY", mode, 1);
    setenv("STRICT_FI_BASE", GetParam(), 1);
    if (strict_hmem) {
      setenv("STRICT_FI_HMEM", "1", 1);
    } else {
      unsetenv("STRICT_FI_HMEM");
    }
    core::reload_knobs();
    ContextOptions o;
    o.peers_on_host = true;
    auto c = Context::open(o);
    if (!c.ok()) return c.status();
    ctx_ = std::move(c).value();
    auto d = ctx_->open_device();
    if (!d.ok()) return d.status();
    dev_ = std::move(d).value();
    return Status::success();
  }
  uint8_t* gpu_alloc(size_t n) {
    auto p = gpu_->alloc_gpu(n, 0);
    EXPECT_TRUE(p.ok());
    allocs_.push_back(static_cast<uint8_t*>(*p));
    return allocs_.back();
  }
  void TearDown() override {
    dev_.reset();
    ctx_.reset();
    for (uint8_t* p : allocs_) gpu_->free_gpu(p);
    for (const char* v : {"XPORT_PROVIDER", "XPORT_GPU_MEMORY", "STRICT_FI_BASE", "STRICT_FI_HMEM",
                          "STRICT_FI_CQ_DATA_SIZE", "XPORT_EAGER_IN_CQ_DATA"})
      unsetenv(v);
    core::reload_knobs();
  }
  test::FakeGpuScope gpu_;  // installed before any Context opens (GPU memory to classify)
  std::vector<uint8_t*> allocs_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Device> dev_;
};

TEST_P(GpuHmem, GpuMemoryIsRegisteredByTheProviderUnderHmem) {
  ASSERT_TRUE(open(true, "hmem").ok());
  EXPECT_TRUE(dev_->capabilities().hmem);
  EXPECT_TRUE(dev_->capabilities().hmem_enabled);
  const HmemTotals before = strict_totals();
  uint8_t* g = gpu_alloc(1 << 16);
  auto reg = dev_->register_memory(g, 1 << 16);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_EQ(reg->memory_type(), MemoryType::cuda);
  EXPECT_FALSE(reg->staged()) << "FI_HMEM offered: no host shadow";
  EXPECT_EQ(strict_totals().registrations, before.registrations + dev_->rails().size())
      << "one FI_HMEM_CUDA registration per rail";
  std::vector<uint8_t> host(4096);
  auto h = dev_->register_memory(host.data(), host.size());
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->memory_type(), MemoryType::host);
  EXPECT_FALSE(h->staged());
  EXPECT_EQ(strict_totals().registrations, before.registrations + dev_->rails().size())
      << "host memory is registered as host memory";
  // Managed memory is still refused, by name.
  void* managed = gpu_->alloc_managed(4096);
  auto m = dev_->register_memory(managed, 4096);
  EXPECT_EQ(m.status().code(), Code::invalid_argument);
  EXPECT_NE(m.status().message().find("managed"), std::string::npos) << m.status().to_string();
  gpu_->free_gpu(managed);
}

TEST_P(GpuHmem, BytesMoveThroughProviderRegisteredGpuMemory) {
  ASSERT_TRUE(open(true, "hmem").ok());
  const HmemTotals before = strict_totals();
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  const size_t max = 1 << 20;
  uint8_t* src = gpu_alloc(max);
  uint8_t* dst = gpu_alloc(max);
  auto sreg = dev_->register_memory(src, max);
  auto dreg = dev_->register_memory(dst, max);
  ASSERT_TRUE(sreg.ok() && dreg.ok());
  ASSERT_FALSE(sreg->staged());
  // send/recv between GPU buffers: rendezvous (eager ones into GPU memory fail: the test below).
  uint64_t msg = 0;
  for (size_t n : {size_t{100000}, max}) {
    ++msg;
    test::fill(src, n, msg);
    std::memset(dst, 0, max);
    auto r = p.recv->irecv(dst, max, *dreg);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto s = p.send->isend(src, n, *sreg);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    auto got = p.recv->wait(*r, soon());
    ASSERT_TRUE(got.ok()) << n << " bytes: " << got.status().to_string();
    EXPECT_EQ(*got, n);
    ASSERT_TRUE(p.send->wait(*s, soon()).ok());
    EXPECT_EQ(test::first_mismatch(dst, n, msg), -1) << n << " bytes";
    // What makes the NIC's writes visible to kernels on this path: a flush read of the GPU
    // buffer through its own registration.
    Status f = p.recv->flush(dst, n, *dreg, soon());
    EXPECT_TRUE(f.ok()) << n << " bytes: " << f.to_string();
  }
  // One-sided: puts from GPU memory into GPU memory (inject-sized and striped-sized), gets into
  // GPU memory, put_signal into GPU memory with the signal in host memory.
  auto w = Window::open(*p.send, soon());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  auto dkey = dev_->import_key(dreg->export_key());
  ASSERT_TRUE(dkey.ok()) << dkey.status().to_string();
  for (size_t n : {size_t{8}, size_t{256 * 1024}}) {
    test::fill(src, n, 50 + n);
    std::memset(dst, 0, n);
    auto t = (*w)->put(*sreg, 0, *dkey, 0, n);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    ASSERT_TRUE((*w)->quiet(soon()).ok());
    EXPECT_EQ(test::first_mismatch(dst, n, 50 + n), -1) << "put of " << n << " bytes";
  }
  test::fill(dst, 100000, 60);
  std::memset(src, 0, 100000);
  auto t = (*w)->get(*sreg, 0, *dkey, 0, 100000);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE((*w)->wait_local(*t, soon()).ok());
  EXPECT_EQ(test::first_mismatch(src, 100000, 60), -1) << "get into GPU memory";
  std::vector<uint64_t> flags(8, 0);
  auto freg = dev_->register_memory(flags.data(), flags.size() * 8);
  ASSERT_TRUE(freg.ok());
  auto fkey = dev_->import_key(freg->export_key());
  ASSERT_TRUE(fkey.ok());
  for (uint64_t round = 1; round <= 10; ++round) {
    const size_t len = 3000 * round;
    test::fill(src, len, 70 + round);
    auto ps = (*w)->put_signal(*sreg, 0, *dkey, 0, len, *fkey, 0, 1, SignalOp::add,
                               SignalOrder::weak);
    ASSERT_TRUE(ps.ok()) << ps.status().to_string();
    ASSERT_TRUE((*w)->wait_signal(*freg, 0, round, soon()).ok());
    EXPECT_EQ(test::first_mismatch(dst, len, 70 + round), -1) << "round " << round;
  }
  ASSERT_TRUE((*w)->quiet(soon()).ok());
  EXPECT_EQ(strict_totals().op_rejects, before.op_rejects)
      << "an operation on GPU memory without its MR's descriptor, or an inject from it";
  EXPECT_EQ(gpu_->bytes_to_host() + gpu_->bytes_to_gpu(), 0u) << "nothing was staged";
}

// An eager message that carries a header (4-byte CQ data as on efa and verbs, headers asked for,
// or a tag too wide for the CQ data) from GPU memory: the provider reads the payload from the
// Region with its FI_HMEM_CUDA descriptor, the header from a bounce buffer; the CPU never copies
// GPU bytes into the bounce buffer.
TEST_P(GpuHmem, HeaderedEagerSendsFromGpuMemoryAreReadByTheProvider) {
  struct Case {
    const char* what;
    const char* env;
    const char* value;
    uint32_t tag;
  };
  for (const Case& k : {Case{"4-byte CQ data", "STRICT_FI_CQ_DATA_SIZE", "4", 0},
                        Case{"XPORT_EAGER_IN_CQ_DATA=0", "XPORT_EAGER_IN_CQ_DATA", "0", 0},
                        Case{"a tag above 0xffff", "XPORT_EAGER_IN_CQ_DATA", "1", 0x12345}}) {
    SCOPED_TRACE(k.what);
    dev_.reset();
    ctx_.reset();
    setenv(k.env, k.value, 1);
    ASSERT_TRUE(open(true, "hmem").ok());
    Pair p = test::connect_pair(*dev_, *dev_);
    ASSERT_TRUE(p.send && p.recv);
    uint8_t* src = gpu_alloc(8192);
    auto sreg = dev_->register_memory(src, 8192);
    ASSERT_TRUE(sreg.ok()) << sreg.status().to_string();
    ASSERT_FALSE(sreg->staged());
    std::vector<uint8_t> dst(8192);
    auto dreg = dev_->register_memory(dst.data(), dst.size());
    ASSERT_TRUE(dreg.ok());
    const HmemTotals before = strict_totals();
    const uint64_t sends_before = strict_hmem_sends();
    uint64_t msg = 0;
    for (size_t n : {size_t{1}, size_t{64}, size_t{4096}}) {
      ++msg;
      test::fill(src, n, msg);
      std::fill(dst.begin(), dst.end(), 0);
      auto r = p.recv->irecv(dst.data(), dst.size(), *dreg, k.tag);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      auto s = p.send->isend(src, n, *sreg, k.tag);
      ASSERT_TRUE(s.ok()) << n << " bytes: " << s.status().to_string();
      auto got = p.recv->wait(*r, soon());
      ASSERT_TRUE(got.ok()) << n << " bytes: " << got.status().to_string();
      EXPECT_EQ(*got, n);
      ASSERT_TRUE(p.send->wait(*s, soon()).ok());
      EXPECT_EQ(test::first_mismatch(dst.data(), n, msg), -1) << n << " bytes";
    }
    EXPECT_GE(strict_hmem_sends(), sends_before + 3)
        << "each message posted with its GPU Region's descriptor, not from a bounce buffer";
    EXPECT_EQ(strict_totals().op_rejects, before.op_rejects);
    EXPECT_EQ(gpu_->bytes_to_host() + gpu_->bytes_to_gpu(), 0u) << "nothing was staged";
    p = Pair{};
    unsetenv(k.env);
  }
}

// An eager message for a receive buffer in GPU memory the provider registered: libxport would
// have to copy it out of its bounce buffer with the CPU, so the receive fails by name (nothing
// written); rendezvous messages into the same buffer, written by the NIC, still arrive.
TEST_P(GpuHmem, EagerMessagesIntoHmemGpuMemoryFailByName) {
  ASSERT_TRUE(open(true, "hmem").ok());
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  const size_t max = 200000;
  uint8_t* src = gpu_alloc(max);
  uint8_t* dst = gpu_alloc(max);
  auto sreg = dev_->register_memory(src, max);
  auto dreg = dev_->register_memory(dst, max);
  ASSERT_TRUE(sreg.ok() && dreg.ok());
  uint64_t msg = 0;
  for (size_t n : {size_t{1}, size_t{64}, size_t{4096}, size_t{100000}}) {
    ++msg;
    test::fill(src, n, msg);
    std::memset(dst, 0, max);
    auto r = p.recv->irecv(dst, max, *dreg);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto s = p.send->isend(src, n, *sreg);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    auto got = p.recv->wait(*r, soon());
    ASSERT_TRUE(p.send->wait(*s, soon()).ok());
    if (n <= dev_->properties().eager_max) {
      EXPECT_EQ(got.status().code(), Code::unsupported) << n << " bytes: " << got.status().to_string();
      EXPECT_NE(got.status().message().find("GPU memory"), std::string::npos)
          << got.status().to_string();
      EXPECT_TRUE(std::all_of(dst, dst + n, [](uint8_t b) { return b == 0; }))
          << "nothing written by the CPU";
    } else {
      ASSERT_TRUE(got.ok()) << n << " bytes: " << got.status().to_string();
      EXPECT_EQ(test::first_mismatch(dst, n, msg), -1) << n << " bytes";
    }
  }
}

// Signal words and atomic targets in GPU memory the provider registered: the CPU that would
// apply or read them cannot touch GPU memory, so they are refused by name before anything is
// sent (the initiator reads the key's flag), and so are local reads and waits on such words.
// Puts into the same Region still work.
TEST_P(GpuHmem, SignalsAndAtomicsOnHmemGpuWordsAreRefused) {
  ASSERT_TRUE(open(true, "hmem").ok());
  Pair p = test::connect_pair(*dev_, *dev_);
  ASSERT_TRUE(p.send && p.recv);
  uint8_t* g = gpu_alloc(4096);
  auto greg = dev_->register_memory(g, 4096);
  ASSERT_TRUE(greg.ok()) << greg.status().to_string();
  ASSERT_FALSE(greg->staged());
  std::vector<uint64_t> host(512, 0);
  auto hreg = dev_->register_memory(host.data(), host.size() * 8);
  ASSERT_TRUE(hreg.ok());
  auto w = Window::open(*p.send, soon());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  auto gkey = dev_->import_key(greg->export_key());
  auto hkey = dev_->import_key(hreg->export_key());
  ASSERT_TRUE(gkey.ok() && hkey.ok());
  const uint64_t issued = (*w)->issued();
  auto refused = [](const Status& st, const char* what) {
    EXPECT_EQ(st.code(), Code::unsupported) << what << ": " << st.to_string();
    EXPECT_NE(st.message().find("GPU memory"), std::string::npos) << what << ": " << st.to_string();
  };
  refused((*w)->signal(*gkey, 0, 1, SignalOp::add, SignalOrder::weak).status(), "signal");
  refused((*w)->reset_signal(*gkey, 0).status(), "reset_signal");
  refused((*w)->put_signal(*hreg, 64, *hkey, 64, 8, *gkey, 0, 1, SignalOp::set,
                           SignalOrder::strong).status(), "put_signal");
  refused((*w)->signal_counter(*gkey, 0, 1, *hreg, 0, SignalOp::add, SignalOrder::weak).status(),
          "signal_counter");
  uint64_t result = 0;
  refused((*w)->atomic(AtomicOp::fetch_add, *gkey, 0, 1, 0, &result).status(), "atomic");
  EXPECT_EQ((*w)->issued(), issued) << "nothing was sent";
  // The owner's own reads and waits on a word in that Region, and a counter there.
  refused((*w)->read_signal(*greg, 0).status(), "read_signal");
  refused((*w)->wait_signal(*greg, 0, 1, Deadline::after(1s)), "wait_signal");
  refused((*w)->wait_counter(*greg, 0, 1, Deadline::after(1s)), "wait_counter");
  refused((*w)->signal_counter(*hkey, 0, 1, *greg, 0, SignalOp::add, SignalOrder::weak).status(),
          "signal_counter with the counter in GPU memory");
  // Puts into it, and signals into host words, still go.
  host[100] = 0x1122334455667788ull;
  auto t = (*w)->put_signal(*hreg, 800, *gkey, 0, 8, *hkey, 0, 1, SignalOp::add,
                            SignalOrder::weak);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE((*w)->wait_signal(*hreg, 0, 1, soon()).ok());
  uint64_t got = 0;
  std::memcpy(&got, g, 8);
  EXPECT_EQ(got, 0x1122334455667788ull);
  ASSERT_TRUE((*w)->quiet(soon()).ok());
}

// auto is the safe path until HMEM covers every operation without the CPU touching GPU memory:
// it stages even where the provider offers FI_HMEM, and does not ask for it.
TEST_P(GpuHmem, AutoStagesEvenWhereFiHmemIsOffered) {
  ASSERT_TRUE(open(true, "auto").ok());
  EXPECT_TRUE(dev_->capabilities().hmem) << "offered";
  EXPECT_FALSE(dev_->capabilities().hmem_enabled) << "auto does not ask for FI_HMEM";
  const HmemTotals before = strict_totals();
  uint8_t* g = gpu_alloc(4096);
  auto reg = dev_->register_memory(g, 4096);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_EQ(reg->memory_type(), MemoryType::cuda);
  EXPECT_TRUE(reg->staged()) << "auto registers GPU memory through a host shadow";
  EXPECT_EQ(strict_totals().registrations, before.registrations) << "no FI_HMEM_CUDA registration";
}

TEST_P(GpuHmem, WithoutFiHmemGpuMemoryIsStaged) {
  ASSERT_TRUE(open(false, "auto").ok());
  EXPECT_FALSE(dev_->capabilities().hmem);
  EXPECT_FALSE(dev_->capabilities().hmem_enabled);
  const HmemTotals before = strict_totals();
  uint8_t* g = gpu_alloc(4096);
  auto reg = dev_->register_memory(g, 4096);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_EQ(reg->memory_type(), MemoryType::cuda);
  EXPECT_TRUE(reg->staged());
  EXPECT_EQ(strict_totals().registrations, before.registrations);
  EXPECT_EQ(strict_totals().refused, before.refused) << "libxport asked for FI_HMEM_CUDA anyway";
}

TEST_P(GpuHmem, RequiringHmemFromAProviderWithoutItFailsByName) {
  Status st = open(false, "hmem");
  EXPECT_EQ(st.code(), Code::unsupported) << st.to_string();
  EXPECT_NE(st.message().find("FI_HMEM"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("strict"), std::string::npos)
      << "the message names the provider: " << st.to_string();
  EXPECT_NE(st.message().find("XPORT_GPU_MEMORY=hmem"), std::string::npos) << st.to_string();
}

TEST_P(GpuHmem, RequiringHmemWhereItIsOfferedRegistersByTheProvider) {
  ASSERT_TRUE(open(true, "hmem").ok());
  EXPECT_TRUE(dev_->capabilities().hmem_enabled);
  uint8_t* g = gpu_alloc(4096);
  auto reg = dev_->register_memory(g, 4096);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_FALSE(reg->staged());
}

TEST_P(GpuHmem, StagedForcesStagingEvenWhereFiHmemIsOffered) {
  ASSERT_TRUE(open(true, "staged").ok());
  EXPECT_TRUE(dev_->capabilities().hmem) << "offered";
  EXPECT_FALSE(dev_->capabilities().hmem_enabled) << "not asked for";
  const HmemTotals before = strict_totals();
  uint8_t* g = gpu_alloc(4096);
  auto reg = dev_->register_memory(g, 4096);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  EXPECT_TRUE(reg->staged());
  EXPECT_EQ(reg->memory_type(), MemoryType::cuda);
  EXPECT_EQ(strict_totals().registrations, before.registrations);
}

TEST_P(GpuHmem, ABadKnobValueIsRefusedByName) {
  Status st = open(true, "gpudirect");
  EXPECT_EQ(st.code(), Code::invalid_argument);
  EXPECT_NE(st.message().find("XPORT_GPU_MEMORY"), std::string::npos) << st.to_string();
}

INSTANTIATE_TEST_SUITE_P(StrictBases, GpuHmem, ::testing::Values("tcp;ofi_rxm", "shm"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return test::param_safe(i.param);
                         });

}  // namespace
}  // namespace xport
