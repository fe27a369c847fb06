// Two-sided (fi_ops_msg) and one-sided (fi_ops_rma) operations of the strict provider: each
// passes the gate, then goes to the base endpoint with the caller's context unchanged. Each post
// is a closure that owns copies of what the caller lends only for the call (iov and rma_iov
// arrays, inject payloads), so that STRICT_FI_DELAY_POST_US can run it later.
#include <cstring>

#include "strict.hpp"

namespace strict {
namespace {

// An iov array, and with FI_INJECT its payload gathered (the caller may reuse it at return).
// Copies of it stay valid: the one-buffer iov of a payload is made at each use.
struct OwnedIov {
  std::vector<iovec> iov;
  std::vector<uint8_t> payload;
  bool inject;
  OwnedIov(const iovec* v, size_t count, bool inj) : iov(v, v + count), inject(inj) {
    if (!inject) return;
    for (const iovec& x : iov) {
      const auto* p = static_cast<const uint8_t*>(x.iov_base);
      payload.insert(payload.end(), p, p + x.iov_len);
    }
  }
  const iovec* data(iovec* one) const {
    if (!inject) return iov.data();
    *one = iovec{const_cast<uint8_t*>(payload.data()), payload.size()};
    return one;
  }
  size_t count() const { return inject ? 1 : iov.size(); }
};

// `desc` of a msg call: the translated descriptors, or none when the caller gave none.
void** msg_desc(bool had_desc, void** d) { return had_desc ? d : nullptr; }

// An inject's payload is read by the CPU at the call: never from GPU memory (FI_HMEM).
bool refuse_inject(fid_ep* ep, const iovec& buf) {
  return touches_hmem(reinterpret_cast<Endpoint*>(ep)->domain, buf);
}

Request to(fi_addr_t peer, Request r) {
  r.peer = peer;
  return r;
}

// ---- messages ----

ssize_t recv(fid_ep* ep, void* buf, size_t len, void* desc, fi_addr_t src, void* ctx) {
  iovec iov{buf, len};
  return submit_recv(ep, Request{.op = Op::recv, .ctx = ctx, .desc = &desc, .count = 1, .iov = &iov},
                     &iov, 1,
                     [=](fid_ep* b, void** d) { return fi_recv(b, buf, len, d[0], src, ctx); });
}

ssize_t recvv(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t src, void* ctx) {
  std::vector<iovec> v(iov, iov + count);
  return submit_recv(
      ep, Request{.op = Op::recv, .ctx = ctx, .desc = desc, .count = count, .iov = iov}, iov, count,
      [=](fid_ep* b, void** d) { return fi_recvv(b, v.data(), d, v.size(), src, ctx); });
}

ssize_t recvmsg(fid_ep* ep, const fi_msg* msg, uint64_t flags) {
  OwnedIov o(msg->msg_iov, msg->iov_count, false);
  const fi_msg m = *msg;
  const bool had_desc = msg->desc != nullptr;
  return submit_recv(
      ep,
      Request{.op = Op::recv,
              .ctx = msg->context,
              .desc = msg->desc,
              .count = msg->iov_count,
              .iov = msg->msg_iov},
      msg->msg_iov, msg->iov_count, [=](fid_ep* b, void** d) {
        iovec one;
        fi_msg x = m;
        x.msg_iov = o.data(&one);
        x.desc = msg_desc(had_desc, d);
        return fi_recvmsg(b, &x, flags);
      });
}

ssize_t send(fid_ep* ep, const void* buf, size_t len, void* desc, fi_addr_t dest, void* ctx) {
  const iovec one{const_cast<void*>(buf), len};
  return submit(ep, to(dest, Request{.op = Op::send, .ctx = ctx, .desc = &desc, .count = 1,
                                     .iov = &one}),
                [=](fid_ep* b, void** d) { return fi_send(b, buf, len, d[0], dest, ctx); });
}

ssize_t sendv(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t dest, void* ctx) {
  std::vector<iovec> v(iov, iov + count);
  return submit(ep, to(dest, Request{.op = Op::send, .ctx = ctx, .desc = desc, .count = count,
                                     .iov = iov}),
                [=](fid_ep* b, void** d) { return fi_sendv(b, v.data(), d, v.size(), dest, ctx); });
}

ssize_t sendmsg(fid_ep* ep, const fi_msg* msg, uint64_t flags) {
  OwnedIov o(msg->msg_iov, msg->iov_count, (flags & FI_INJECT) != 0);
  const fi_msg m = *msg;
  const bool had_desc = msg->desc != nullptr;
  return submit(ep,
                to(msg->addr, Request{.op = Op::send,
                                      .ctx = msg->context,
                                      .desc = msg->desc,
                                      .count = msg->iov_count,
                                      .has_data = (flags & FI_REMOTE_CQ_DATA) != 0,
                                      .data = msg->data,
                                      .iov = msg->msg_iov,
                                      .inject = (flags & FI_INJECT) != 0}),
                [=](fid_ep* b, void** d) {
                  iovec one;
                  fi_msg x = m;
                  x.msg_iov = o.data(&one);
                  x.iov_count = o.count();
                  // An inject's payload was gathered into one buffer that needs no descriptor.
                  x.desc = (flags & FI_INJECT) ? nullptr : msg_desc(had_desc, d);
                  return fi_sendmsg(b, &x, flags);
                });
}

ssize_t inject(fid_ep* ep, const void* buf, size_t len, fi_addr_t dest) {
  const iovec one{const_cast<void*>(buf), len};
  if (refuse_inject(ep, one)) return -FI_EINVAL;
  const auto* p = static_cast<const uint8_t*>(buf);
  std::vector<uint8_t> copy(p, p + len);
  return submit(ep, to(dest, Request{.op = Op::send, .completes = false}),
                [=](fid_ep* b, void**) { return fi_inject(b, copy.data(), copy.size(), dest); });
}

ssize_t senddata(fid_ep* ep, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest,
                 void* ctx) {
  const iovec one{const_cast<void*>(buf), len};
  return submit(
      ep,
      to(dest, Request{.op = Op::send,
                       .ctx = ctx,
                       .desc = &desc,
                       .count = 1,
                       .has_data = true,
                       .data = data,
                       .iov = &one}),
      [=](fid_ep* b, void** d) { return fi_senddata(b, buf, len, d[0], data, dest, ctx); });
}

ssize_t injectdata(fid_ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
  if (refuse_inject(ep, iovec{const_cast<void*>(buf), len})) return -FI_EINVAL;
  const auto* p = static_cast<const uint8_t*>(buf);
  std::vector<uint8_t> copy(p, p + len);
  return submit(
      ep, to(dest, Request{.op = Op::send, .completes = false, .has_data = true, .data = data}),
      [=](fid_ep* b, void**) { return fi_injectdata(b, copy.data(), copy.size(), data, dest); });
}

// ---- RMA ----

ssize_t read(fid_ep* ep, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t addr,
             uint64_t key, void* ctx) {
  const iovec one{buf, len};
  return submit(
      ep, to(src, Request{.op = Op::read, .ctx = ctx, .desc = &desc, .count = 1, .iov = &one}),
      [=](fid_ep* b, void** d) { return fi_read(b, buf, len, d[0], src, addr, key, ctx); });
}

ssize_t readv(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t src, uint64_t addr,
              uint64_t key, void* ctx) {
  std::vector<iovec> v(iov, iov + count);
  return submit(
      ep, to(src, Request{.op = Op::read, .ctx = ctx, .desc = desc, .count = count, .iov = iov}),
      [=](fid_ep* b, void** d) { return fi_readv(b, v.data(), d, v.size(), src, addr, key, ctx); });
}

// A fi_msg_rma with its arrays (and an inject's payload) owned.
struct OwnedRma {
  fi_msg_rma m;
  OwnedIov iov;
  std::vector<fi_rma_iov> rma;
  bool had_desc;
  OwnedRma(const fi_msg_rma* msg, bool inject)
      : m(*msg),
        iov(msg->msg_iov, msg->iov_count, inject),
        rma(msg->rma_iov, msg->rma_iov + msg->rma_iov_count),
        had_desc(msg->desc != nullptr) {}
  fi_msg_rma view(void** d, iovec* one) const {
    fi_msg_rma x = m;
    x.msg_iov = iov.data(one);
    x.iov_count = iov.count();
    x.rma_iov = rma.data();
    x.desc = iov.inject ? nullptr : msg_desc(had_desc, d);
    return x;
  }
};

ssize_t readmsg(fid_ep* ep, const fi_msg_rma* msg, uint64_t flags) {
  OwnedRma o(msg, false);
  return submit(
      ep,
      to(msg->addr,
         Request{.op = Op::read,
                 .ctx = msg->context,
                 .desc = msg->desc,
                 .count = msg->iov_count,
                 .iov = msg->msg_iov}),
      [=](fid_ep* b, void** d) {
        iovec one;
        fi_msg_rma x = o.view(d, &one);
        return fi_readmsg(b, &x, flags);
      });
}

ssize_t write(fid_ep* ep, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t addr,
              uint64_t key, void* ctx) {
  const iovec one{const_cast<void*>(buf), len};
  return submit(
      ep, to(dest, Request{.op = Op::write, .ctx = ctx, .desc = &desc, .count = 1, .iov = &one}),
      [=](fid_ep* b, void** d) { return fi_write(b, buf, len, d[0], dest, addr, key, ctx); });
}

ssize_t writev(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
               uint64_t addr, uint64_t key, void* ctx) {
  std::vector<iovec> v(iov, iov + count);
  return submit(ep, to(dest, Request{.op = Op::write, .ctx = ctx, .desc = desc, .count = count,
                                     .iov = iov}),
                [=](fid_ep* b, void** d) {
                  return fi_writev(b, v.data(), d, v.size(), dest, addr, key, ctx);
                });
}

// On a 4-byte NIC the application's data has nothing above the low 32 bits (the gate refuses
// it otherwise): the high word carries the write's length to the target, which reports it as
// the completion's len the way hardware does (the bases report 0 for remote writes).
uint64_t with_length(fid_ep* ep, uint64_t data, size_t len) {
  auto* e = reinterpret_cast<Endpoint*>(ep);
  if (e->domain->cfg.cq_data_size != 4 || (data >> 32) != 0) return data;
  const uint64_t l = len < 0xffffffffull ? len : 0xffffffffull;
  return data | (l << 32);
}

ssize_t writemsg(fid_ep* ep, const fi_msg_rma* msg, uint64_t flags) {
  const bool inj = (flags & FI_INJECT) != 0;
  OwnedRma o(msg, inj);
  size_t total = 0;
  for (size_t i = 0; i < msg->iov_count; ++i) total += msg->msg_iov[i].iov_len;
  const uint64_t wire = (flags & FI_REMOTE_CQ_DATA) ? with_length(ep, msg->data, total) : 0;
  return submit(ep,
                to(msg->addr, Request{.op = Op::write,
                                      .ctx = msg->context,
                                      .desc = msg->desc,
                                      .count = msg->iov_count,
                                      .has_data = (flags & FI_REMOTE_CQ_DATA) != 0,
                                      .data = msg->data,
                                      .iov = msg->msg_iov,
                                      .inject = inj}),
                [=](fid_ep* b, void** d) {
                  iovec one;
                  fi_msg_rma x = o.view(d, &one);
                  if (flags & FI_REMOTE_CQ_DATA) x.data = wire;
                  return fi_writemsg(b, &x, flags);
                });
}

ssize_t inject_write(fid_ep* ep, const void* buf, size_t len, fi_addr_t dest, uint64_t addr,
                     uint64_t key) {
  if (refuse_inject(ep, iovec{const_cast<void*>(buf), len})) return -FI_EINVAL;
  const auto* p = static_cast<const uint8_t*>(buf);
  std::vector<uint8_t> copy(p, p + len);
  return submit(ep, to(dest, Request{.op = Op::write, .completes = false}), [=](fid_ep* b, void**) {
    return fi_inject_write(b, copy.data(), copy.size(), dest, addr, key);
  });
}

ssize_t writedata(fid_ep* ep, const void* buf, size_t len, void* desc, uint64_t data,
                  fi_addr_t dest, uint64_t addr, uint64_t key, void* ctx) {
  const uint64_t wire = with_length(ep, data, len);
  const iovec one{const_cast<void*>(buf), len};
  return submit(ep,
                to(dest, Request{.op = Op::write,
                                 .ctx = ctx,
                                 .desc = &desc,
                                 .count = 1,
                                 .has_data = true,
                                 .data = data,
                                 .iov = &one}),
                [=](fid_ep* b, void** d) {
                  return fi_writedata(b, buf, len, d[0], wire, dest, addr, key, ctx);
                });
}

ssize_t inject_writedata(fid_ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                         uint64_t addr, uint64_t key) {
  if (refuse_inject(ep, iovec{const_cast<void*>(buf), len})) return -FI_EINVAL;
  const auto* p = static_cast<const uint8_t*>(buf);
  std::vector<uint8_t> copy(p, p + len);
  const uint64_t wire = with_length(ep, data, len);
  return submit(
      ep, to(dest, Request{.op = Op::write, .completes = false, .has_data = true, .data = data}),
      [=](fid_ep* b, void**) {
        return fi_inject_writedata(b, copy.data(), copy.size(), wire, dest, addr, key);
      });
}

}  // namespace

fi_ops_msg msg_ops = {
    .size = sizeof(fi_ops_msg),
    .recv = recv,
    .recvv = recvv,
    .recvmsg = recvmsg,
    .send = send,
    .sendv = sendv,
    .sendmsg = sendmsg,
    .inject = inject,
    .senddata = senddata,
    .injectdata = injectdata,
};

fi_ops_rma rma_ops = {
    .size = sizeof(fi_ops_rma),
    .read = read,
    .readv = readv,
    .readmsg = readmsg,
    .write = write,
    .writev = writev,
    .writemsg = writemsg,
    .inject = inject_write,
    .writedata = writedata,
    .injectdata = inject_writedata,
};

}  // namespace strict
