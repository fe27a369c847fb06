// Two processes, GPU memory on both sides: this one (GPU XPORT_TEST_GPU_SRC) sends, puts,
// signals and counts into the GPU memory of xport-gpu-peer (GPU XPORT_TEST_GPU_DST; the same
// GPU by default, another with both set), host-initiated and, on a real GPU, device-initiated
// through GpuProxy; the peer checks every byte and word in its GPU memory. Without a GPU both
// processes use the stand-in driver (XTEST_FAKE_GPU=1) and the kernels' part is skipped.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../integration/harness.hpp"
#include "../integration/provider_fixture.hpp"
#include "../unit/gpu/fake_driver.hpp"
#include "gpu/driver.hpp"
#include "xport/gpu_proxy.hpp"

extern "C" {
int xtest_ring_alloc(uint32_t bytes, void** host, void** device, void** head);
void xtest_ring_free(void* host, void* head);
int xtest_finish(int* statuses, int n);
int xtest_gpus();
int xtest_launch_proxy_put_signals(xport::gpu_ring::DeviceRing r, int blocks, int threads,
                                   uint64_t slice, uint64_t deadline_cycles);
}

namespace xport {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kSecondOfCycles = 2'000'000'000ull;

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

class TwoProcessGpu : public test::ProviderTest {
 protected:
  void SetUp() override {
    real_ = xtest_gpus() > 0 && gpu::driver().available();
    if (!real_) {
      fake_ = std::make_unique<test::FakeGpuScope>();
      setenv("XTEST_FAKE_GPU", "1", 1);
    }
    test::ProviderTest::SetUp();
  }
  void TearDown() override {
    test::ProviderTest::TearDown();
    unsetenv("XTEST_FAKE_GPU");
    if (src_ != nullptr) gpu::driver().free_gpu(src_);
    fake_.reset();
  }
  std::string expect_line(test::ChildProcess& p, const std::string& prefix) {
    std::string err;
    std::string line = p.read_line(30000, &err, [&] { (void)dev_->progress(); });
    EXPECT_EQ(line.rfind(prefix, 0), 0u) << "expected '" << prefix << "...' from the peer, got '"
                                         << line << "' " << err;
    return line.size() > prefix.size() ? line.substr(prefix.size()) : "";
  }
  // Fills [off, off + n) of the source GPU buffer with the pattern of `seed`.
  void fill_src(size_t off, size_t n, uint64_t seed) {
    std::vector<uint8_t> host(n);
    test::fill(host.data(), n, seed);
    auto s = gpu::driver().open_copy_queue(*gpu::driver().classify(src_));
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->copy_to_gpu(src_ + off, host.data(), n).ok());
    ASSERT_TRUE((*s)->synchronize().ok());
  }
  bool real_ = false;
  std::unique_ptr<test::FakeGpuScope> fake_;
  uint8_t* src_ = nullptr;
};

TEST_P(TwoProcessGpu, EveryOperationLandsInTheOtherProcesssGpuMemory) {
  const char* bin = std::getenv("XTEST_GPU_PEER_BIN");
  auto peer = test::ChildProcess::spawn({bin != nullptr ? bin : "xport-gpu-peer"}, {});
  ASSERT_TRUE(peer.started());
  const std::string handle = expect_line(peer, "HANDLE ");
  auto data_key = dev_->import_key(test::from_hex(expect_line(peer, "DATA ")));
  auto sig_key = dev_->import_key(test::from_hex(expect_line(peer, "SIG ")));
  ASSERT_TRUE(data_key.ok() && sig_key.ok()) << data_key.status().to_string();
  auto comm = dev_->connect(test::from_hex(handle), Deadline::after(20s));
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  auto w = Window::open(**comm, Deadline::after(20s));
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  constexpr size_t kSrc = 8 << 20;
  auto src = gpu::driver().alloc_gpu(kSrc, env_int("XPORT_TEST_GPU_SRC"));
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  src_ = static_cast<uint8_t*>(*src);
  auto reg = dev_->register_memory(src_, kSrc);
  ASSERT_TRUE(reg.ok()) << reg.status().to_string();
  ASSERT_TRUE(reg->staged());
  std::vector<uint64_t> counters(8, 0);
  auto creg = dev_->register_memory(counters.data(), 64);
  ASSERT_TRUE(creg.ok());
  auto ask = [&](const std::string& cmd, const std::string& want) {
    ASSERT_TRUE(peer.write_line(cmd));
    EXPECT_EQ(expect_line(peer, "OK"), want) << cmd;
  };

  // Device-initiated first (a real GPU): 64 kernel threads put_signal 4 KiB each into the
  // peer's GPU memory at [0, 256 KiB), signal word 1 counting them.
  if (real_) {
    void *h = nullptr, *dptr = nullptr, *head = nullptr;
    ASSERT_EQ(xtest_ring_alloc(4096, &h, &dptr, &head), 0);  // the launchers' statuses
    fill_src(0, 64 * 4096, 40);
    auto proxy = GpuProxy::open(*dev_);
    ASSERT_TRUE(proxy.ok()) << proxy.status().to_string();
    ASSERT_TRUE((*proxy)->add_window(**w).ok() && (*proxy)->add_region(*reg).ok() &&
                (*proxy)->add_remote(*data_key).ok() && (*proxy)->add_remote(*sig_key).ok());
    ASSERT_TRUE((*proxy)->start().ok());
    ASSERT_EQ(xtest_launch_proxy_put_signals((*proxy)->ring(), 2, 32, 4096, 30 * kSecondOfCycles), 0);
    int st[2] = {99, 99};
    ASSERT_EQ(xtest_finish(st, 2), 0);
    EXPECT_EQ(st[0], 0) << (*proxy)->last_error().to_string();
    EXPECT_EQ(st[1], 0) << (*proxy)->last_error().to_string();
    ask("wait 1 64 0 262144 40", " 64");
    proxy->reset();
    xtest_ring_free(h, head);
  }
  // GPU -> GPU message, 4 MiB (rendezvous; staged on both sides).
  fill_src(0, 4 << 20, 31);
  ASSERT_TRUE(peer.write_line("recv 0 4194304 31"));
  auto r = (*comm)->isend(src_, 4 << 20, *reg);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto sent = (*comm)->wait(*r, Deadline::after(30s));
  ASSERT_TRUE(sent.ok()) << sent.status().to_string();
  EXPECT_EQ(expect_line(peer, "OK"), "");
  // Host-initiated put_signal: 1 MiB at 4 MiB, word 0 + 1.
  fill_src(0, 1 << 20, 32);
  ASSERT_TRUE((*w)->put_signal(*reg, 0, *data_key, 4 << 20, 1 << 20, *sig_key, 0, 1).ok());
  ask("wait 0 1 4194304 1048576 32", " 1");
  // A plain put then a strong signal (set) that covers it: 64 KiB at 6 MiB, word 2 = 5.
  fill_src(1 << 20, 64 << 10, 33);
  ASSERT_TRUE((*w)->put(*reg, 1 << 20, *data_key, 6 << 20, 64 << 10).ok());
  ASSERT_TRUE((*w)->signal(*sig_key, 16, 5, SignalOp::set).ok());
  ASSERT_TRUE(peer.write_line("wait 2 5 0 0 0"));
  EXPECT_EQ(expect_line(peer, "OK"), " 5");
  ASSERT_TRUE(peer.write_line("wait 2 5 6291456 65536 33"));
  EXPECT_EQ(expect_line(peer, "OK"), " 5");
  // put_signal_counter and signal_counter: the local counter counts both once delivered.
  fill_src(2 << 20, 8192, 34);
  auto t1 = (*w)->put_signal_counter(*reg, 2 << 20, *data_key, 7 << 20, 8192, *sig_key, 24, 1,
                                     *creg, 0);
  auto t2 = (*w)->signal_counter(*sig_key, 24, 1, *creg, 0);
  ASSERT_TRUE(t1.ok() && t2.ok()) << t1.status().to_string() << t2.status().to_string();
  ASSERT_TRUE((*w)->wait_counter(*creg, 0, 2, Deadline::after(30s)).ok())
      << "the counter of two delivered operations";
  ask("wait 3 2 7340032 8192 34", " 2");
  ASSERT_TRUE((*w)->quiet(Deadline::after(30s)).ok());
  peer.write_line("bye");
  EXPECT_EQ(peer.wait_exit(20000), 0);
}

INSTANTIATE_TEST_SUITE_P(Providers, TwoProcessGpu,
                         ::testing::Values(test::ProviderParam{"shm", "auto"},
                                           test::ProviderParam{"tcp;ofi_rxm", "manual"}),
                         test::provider_param_name);

}  // namespace
}  // namespace xport
