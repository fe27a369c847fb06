// Raw libfabric through the strict provider with STRICT_FI_HMEM: FI_HMEM and FI_MR_HMEM are
// advertised to whoever asks; an FI_HMEM_CUDA registration is refused where FI_HMEM was not
// granted; with it, an operation on the registered GPU memory without that MR's descriptor fails
// with a strict error, and an inject from it is refused (the CPU would read GPU memory).
#include <cstring>

#include "raw_fixture.hpp"

namespace strict_test {
namespace {

using RawHmem = RawRig;

// A registration of `buf` as memory of CUDA device 0.
int reg_cuda(fid_domain* domain, void* buf, size_t len, fid_mr** mr) {
  iovec iov{buf, len};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  attr.requested_key = 77;
  attr.iface = FI_HMEM_CUDA;
  attr.device.cuda = 0;
  return fi_mr_regattr(domain, &attr, 0, mr);
}

TEST_F(RawHmem, CudaRegistrationIsRefusedWithoutFiHmem) {
  ScopedEnv env{{"STRICT_FI_HMEM", "0"}};
  ASSERT_TRUE(open_rig());
  EXPECT_EQ(info_->caps & FI_HMEM, 0u);
  std::vector<uint8_t> a(4096);
  fid_mr* mr = nullptr;
  EXPECT_EQ(reg_cuda(domain_, a.data(), a.size(), &mr), -FI_EOPNOTSUPP);
  // Nor is FI_HMEM granted to whoever asks for it.
  fi_info* hints = strict_hints(kMrModes | FI_MR_HMEM);
  hints->caps |= FI_HMEM;
  fi_info* list = nullptr;
  EXPECT_EQ(fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &list), -FI_ENODATA);
  fi_freeinfo(hints);
  fi_freeinfo(list);
}

TEST_F(RawHmem, GpuMemoryNeedsItsDescriptorAndIsNeverInjected) {
  ScopedEnv env{{"STRICT_FI_HMEM", "1"}};
  RigOptions o;
  o.mr_mode = kMrModes | FI_MR_HMEM;
  o.extra_caps = FI_HMEM;
  ASSERT_TRUE(open_rig(o));
  EXPECT_NE(info_->caps & FI_HMEM, 0u);
  EXPECT_NE(info_->domain_attr->mr_mode & FI_MR_HMEM, 0);
  std::vector<uint8_t> gpu(4096, 7);  // "GPU memory": host bytes registered as CUDA memory
  fid_mr* mr = nullptr;
  ASSERT_EQ(reg_cuda(domain_, gpu.data(), gpu.size(), &mr), 0);
  adopt_mr(raw_fabric::Fid<fid_mr>(mr));
  fi_context2 ctx{};
  ASSERT_EQ(fi_send(ep_[0], gpu.data() + 100, 64, nullptr, addr_[1], &ctx), 0);
  Completion c = next();
  ASSERT_EQ(c.ret, -FI_EAVAIL) << "a send from GPU memory without its descriptor must fail";
  EXPECT_EQ(c.err.op_context, &ctx);
  EXPECT_EQ(c.err.err, FI_EACCES);
  EXPECT_NE(c.text.find("FI_MR_HMEM violation"), std::string::npos) << c.text;
  // A descriptor of host memory does not cover GPU memory either.
  std::vector<uint8_t> host(4096);
  fid_mr* hmr = reg(host.data(), host.size(), 0, 78);
  ASSERT_NE(hmr, nullptr);
  ASSERT_EQ(fi_send(ep_[0], gpu.data(), 64, fi_mr_desc(hmr), addr_[1], &ctx), 0);
  c = next();
  ASSERT_EQ(c.ret, -FI_EAVAIL);
  EXPECT_NE(c.text.find("no FI_HMEM_CUDA MR covering them"), std::string::npos) << c.text;
  EXPECT_EQ(fi_inject(ep_[0], gpu.data(), 8, addr_[1]), -FI_EINVAL);
  EXPECT_EQ(retry([&] { return fi_inject(ep_[0], host.data(), 8, addr_[1]); }), 0)
      << "host memory is injected as ever";
}

}  // namespace
}  // namespace strict_test
