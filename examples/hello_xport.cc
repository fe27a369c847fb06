// The README example: one device talks to itself through a listener, a send and a put.
#include <xport/xport.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>

int main() {
  using namespace std::chrono_literals;
  xport::ContextOptions options;
  options.peers_on_host = true;  // all peers on this host: shm is the first choice
  auto ctx = xport::Context::open(options);
  if (!ctx.ok()) return std::fprintf(stderr, "%s\n", ctx.status().to_string().c_str()), 1;
  auto dev = (*ctx)->open_device();
  if (!dev.ok()) return std::fprintf(stderr, "%s\n", dev.status().to_string().c_str()), 1;
  char src[64] = "hello over libxport", dst[64] = {};
  auto rs = (*dev)->register_memory(src, sizeof src), rd = (*dev)->register_memory(dst, sizeof dst);
  auto listener = (*dev)->listen();  // its handle() is what a runtime ships to the peer
  auto send = (*dev)->connect((*listener)->handle(), xport::Deadline::after(5s));
  auto recv = (*listener)->accept(xport::Deadline::after(5s));
  if (!send.ok() || !recv.ok()) return std::fprintf(stderr, "connect failed\n"), 1;
  auto r = (*recv)->irecv(dst, sizeof dst, *rd);
  auto s = (*send)->isend(src, std::strlen(src) + 1, *rs);
  auto got = (*recv)->wait(*r, xport::Deadline::after(5s));
  if (!got.ok() || !(*send)->wait(*s, xport::Deadline::after(5s)).ok()) return 1;
  std::printf("received %zu bytes: %s\n", *got, dst);
  auto window = xport::Window::open(**send);  // one-sided: put src into dst, then quiet
  auto remote = (*dev)->import_key(rd->export_key());
  xport::Status st = (*window)->put(*rs, 0, *remote, 32, 6).status();
  if (st.ok()) st = (*window)->quiet(xport::Deadline::after(5s));
  std::printf("put: %s, dst+32 = %.5s\n", st.to_string().c_str(), dst + 32);
  return st.ok() ? 0 : 1;
}
