// A Session of xport-bench (ops.hpp): the registered buffers (host or GPU memory), the listener,
// and the comms each way and windows of one connection to a peer.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "bootstrap.hpp"
#include "gpu_calls.hpp"
#include "ops.hpp"

namespace bench {

using namespace xport;

std::string gpu_unavailable(int gpu) { return gpu::select(gpu); }

Result<std::unique_ptr<Session>> Session::open(Device& dev, size_t bytes,
                                               std::chrono::seconds timeout, int comms,
                                               Memory memory) {
  auto s = std::unique_ptr<Session>(new Session(dev, timeout, std::max(comms, 1)));
  s->len = bytes;
  s->memory = memory;
  // The buffer, then a page whose first words are the round trips' signals.
  const size_t page = 4096, alloc = s->word_offset() + page;
  if (memory.cuda) {
    void* p = nullptr;
    std::string why = gpu::select(memory.gpu);
    if (why.empty()) why = gpu::alloc(alloc, &p);  // zeroed
    if (!why.empty()) return Status(Code::unsupported, "--memory cuda: " + why);
    s->buf = static_cast<uint8_t*>(p);
  } else {
    s->buf = static_cast<uint8_t*>(std::aligned_alloc(page, alloc));
  }
  s->ctl = static_cast<uint8_t*>(std::aligned_alloc(page, page));
  if (s->buf == nullptr || s->ctl == nullptr) {
    return Status(Code::resource, "cannot allocate " + std::to_string(bytes) + " bytes of buffer");
  }
  // Fault the pages in now, not during the first measurement.
  if (!memory.cuda) std::memset(s->buf, 0, alloc);
  std::memset(s->ctl, 0, page);
  XPORT_ASSIGN_OR_RETURN(s->data, dev.register_memory(s->buf, s->word_offset() + 64));
  if (memory.cuda && s->data.memory_type() != MemoryType::cuda) {
    return Status(Code::unsupported,
                  "--memory cuda: libxport registered the GPU buffer as host memory (it found "
                  "no CUDA driver: libcuda.so.1)");
  }
  XPORT_ASSIGN_OR_RETURN(s->ctl_region, dev.register_memory(s->ctl, 256));
  XPORT_ASSIGN_OR_RETURN(s->listener, dev.listen());
  return s;
}

void Session::close_comms() {
  proxy.reset();  // its thread issues on the windows
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
  if (memory.cuda) {
    gpu::release(buf);
  } else {
    std::free(buf);
  }
  std::free(ctl);
}

Result<uint8_t*> Session::writable(size_t off, size_t n) {
  if (off + n > len) return Status(Code::internal, "check: range past the buffer");
  if (!memory.cuda) return buf + off;
  if (mirror.size() < len) mirror.resize(len);
  return mirror.data() + off;
}

Status Session::written(size_t off, size_t n) {
  if (!memory.cuda) return Status();
  const std::string why = gpu::copy_to_gpu(buf + off, mirror.data() + off, n);
  return why.empty() ? Status() : Status(Code::internal, why);
}

Result<const uint8_t*> Session::readable(size_t off, size_t n) {
  XPORT_ASSIGN_OR_RETURN(uint8_t * m, writable(off, n));
  if (!memory.cuda) return static_cast<const uint8_t*>(m);
  const std::string why = gpu::copy_from_gpu(m, buf + off, n);
  if (!why.empty()) return Status(Code::internal, why);
  return static_cast<const uint8_t*>(m);
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
  // Round trips count signals from the word's value now: staging does not initialise the host
  // shadow of a GPU word, and that is where signals are applied and copied on from.
  XPORT_ASSIGN_OR_RETURN(signals_seen, win[0]->read_signal(data, word_offset()));
  return Status();
}

}  // namespace bench
