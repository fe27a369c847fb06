// A Session of xport-bench (ops.hpp): the registered buffers, the listener, and the comms each
// way and windows of one connection to a peer.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "bootstrap.hpp"
#include "ops.hpp"

namespace bench {

using namespace xport;

Result<std::unique_ptr<Session>> Session::open(Device& dev, size_t bytes,
                                               std::chrono::seconds timeout, int comms) {
  auto s = std::unique_ptr<Session>(new Session(dev, timeout, std::max(comms, 1)));
  s->len = bytes;
  const size_t page = 4096, alloc = (bytes + page - 1) / page * page;
  s->buf = static_cast<uint8_t*>(std::aligned_alloc(page, alloc));
  s->ctl = static_cast<uint8_t*>(std::aligned_alloc(page, page));
  if (s->buf == nullptr || s->ctl == nullptr) {
    return Status(Code::resource, "cannot allocate " + std::to_string(bytes) + " bytes of buffer");
  }
  std::memset(s->buf, 0, alloc);  // fault the pages in now, not during the first measurement
  std::memset(s->ctl, 0, page);
  XPORT_ASSIGN_OR_RETURN(s->data, dev.register_memory(s->buf, bytes));
  XPORT_ASSIGN_OR_RETURN(s->ctl_region, dev.register_memory(s->ctl, 256));
  XPORT_ASSIGN_OR_RETURN(s->listener, dev.listen());
  return s;
}

void Session::close_comms() {
  win.clear();
  tx.clear();
  rx.clear();
}

Session::~Session() {
  // Comms and windows close before the memory they point into is released.
  close_comms();
  listener.reset();
  data = Region();
  ctl_region = Region();
  std::free(buf);
  std::free(ctl);
}

std::string Session::hello() const {
  return hex(listener->handle()) + " " + hex(data.export_key());
}

Status Session::join(const std::string& peer_hello, bool initiator) {
  const size_t sp = peer_hello.find(' ');
  if (sp == std::string::npos) return Status(Code::protocol, "bootstrap: malformed peer hello");
  XPORT_ASSIGN_OR_RETURN(auto handle, unhex(peer_hello.substr(0, sp)));
  XPORT_ASSIGN_OR_RETURN(auto key, unhex(peer_hello.substr(sp + 1)));
  XPORT_ASSIGN_OR_RETURN(remote, dev.import_key(key));
  auto connect_all = [&]() -> Status {
    for (int k = 0; k < comms; ++k) {
      XPORT_ASSIGN_OR_RETURN(auto c, dev.connect(handle, deadline()));
      tx.push_back(std::move(c));
    }
    return Status();
  };
  auto accept_all = [&]() -> Status {
    for (int k = 0; k < comms; ++k) {
      XPORT_ASSIGN_OR_RETURN(auto c, listener->accept(deadline()));
      rx.push_back(std::move(c));
    }
    return Status();
  };
  if (initiator) {
    XPORT_RETURN_IF_ERROR(connect_all());
    XPORT_RETURN_IF_ERROR(accept_all());
  } else {
    XPORT_RETURN_IF_ERROR(accept_all());
    XPORT_RETURN_IF_ERROR(connect_all());
  }
  for (auto& c : tx) {
    XPORT_ASSIGN_OR_RETURN(auto w, Window::open(*c));
    win.push_back(std::move(w));
  }
  return Status();
}

}  // namespace bench
