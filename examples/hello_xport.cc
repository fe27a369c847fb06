// The README example: one device talks to itself through a listener, a send and a put.
#include <xport/xport.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>

using namespace std::chrono_literals;

static int fail(const xport::Status& st) {  // every failure says what failed and where
  std::fprintf(stderr, "%s\n", st.to_string().c_str());
  return 1;
}

int main() {
  xport::ContextOptions options;
  options.peers_on_host = true;  // all peers on this host: shm is the first choice
  auto ctx = xport::Context::open(options);  // Result<std::unique_ptr<Context>>
  if (!ctx.ok()) return fail(ctx.status());
  auto dev = (*ctx)->open_device();
  if (!dev.ok()) return fail(dev.status());
  char src[64] = "hello over libxport", dst[64] = {};
  auto rs = (*dev)->register_memory(src, sizeof src), rd = (*dev)->register_memory(dst, sizeof dst);
  if (!rs.ok() || !rd.ok()) return fail(rs.ok() ? rd.status() : rs.status());
  auto listener = (*dev)->listen();  // its handle() is what a runtime ships to the peer
  if (!listener.ok()) return fail(listener.status());
  auto send = (*dev)->connect((*listener)->handle(), xport::Deadline::after(5s));
  auto recv = (*listener)->accept(xport::Deadline::after(5s));
  if (!send.ok() || !recv.ok()) return fail(send.ok() ? recv.status() : send.status());
  auto r = (*recv)->irecv(dst, sizeof dst, *rd);
  auto s = (*send)->isend(src, std::strlen(src) + 1, *rs);
  if (!r.ok() || !s.ok()) return fail(r.ok() ? s.status() : r.status());
  auto got = (*recv)->wait(*r, xport::Deadline::after(5s));  // Result<size_t>: 20
  if (!got.ok()) return fail(got.status());
  if (auto st = (*send)->wait(*s, xport::Deadline::after(5s)); !st.ok()) return fail(st.status());
  std::printf("received %zu bytes: %s\n", *got, dst);
  auto window = xport::Window::open(**send);  // one-sided: put src[0..6) into dst[32..38)
  if (!window.ok()) return fail(window.status());
  auto remote = (*dev)->import_key(rd->export_key());  // keys travel between peers as bytes
  if (!remote.ok()) return fail(remote.status());
  auto ticket = (*window)->put(*rs, 0, *remote, 32, 6);  // Result<Ticket>
  if (!ticket.ok()) return fail(ticket.status());
  xport::Status st = (*window)->quiet(xport::Deadline::after(5s));  // local completion
  std::printf("put: %s, dst+32 = %.5s\n", st.to_string().c_str(), dst + 32);
  return st.ok() ? 0 : 1;
}
