// Two-sided (fi_ops_msg) and one-sided (fi_ops_rma) operations of the strict provider: each
// passes the gate, then goes to the base endpoint with the caller's context unchanged.
#include "strict.hpp"

namespace strict {
namespace {

// ---- messages ----

ssize_t recv(fid_ep* ep, void* buf, size_t len, void* desc, fi_addr_t src, void* ctx) {
  return pass(ep, Op::recv, ctx, true, &desc, 1,
              [&](fid_ep* b, void** d) { return fi_recv(b, buf, len, d[0], src, ctx); });
}

ssize_t recvv(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t src, void* ctx) {
  return pass(ep, Op::recv, ctx, true, desc, count,
              [&](fid_ep* b, void** d) { return fi_recvv(b, iov, d, count, src, ctx); });
}

ssize_t recvmsg(fid_ep* ep, const fi_msg* msg, uint64_t flags) {
  return pass(ep, Op::recv, msg->context, true, msg->desc, msg->iov_count,
              [&](fid_ep* b, void** d) {
                fi_msg m = *msg;
                m.desc = msg->desc != nullptr ? d : nullptr;
                return fi_recvmsg(b, &m, flags);
              });
}

ssize_t send(fid_ep* ep, const void* buf, size_t len, void* desc, fi_addr_t dest, void* ctx) {
  return pass(ep, Op::send, ctx, true, &desc, 1,
              [&](fid_ep* b, void** d) { return fi_send(b, buf, len, d[0], dest, ctx); });
}

ssize_t sendv(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t dest, void* ctx) {
  return pass(ep, Op::send, ctx, true, desc, count,
              [&](fid_ep* b, void** d) { return fi_sendv(b, iov, d, count, dest, ctx); });
}

ssize_t sendmsg(fid_ep* ep, const fi_msg* msg, uint64_t flags) {
  return pass(ep, Op::send, msg->context, true, msg->desc, msg->iov_count,
              [&](fid_ep* b, void** d) {
                fi_msg m = *msg;
                m.desc = msg->desc != nullptr ? d : nullptr;
                return fi_sendmsg(b, &m, flags);
              });
}

ssize_t inject(fid_ep* ep, const void* buf, size_t len, fi_addr_t dest) {
  return pass(ep, Op::send, nullptr, false, nullptr, 0,
              [&](fid_ep* b, void**) { return fi_inject(b, buf, len, dest); });
}

ssize_t senddata(fid_ep* ep, const void* buf, size_t len, void* desc, uint64_t data, fi_addr_t dest,
                 void* ctx) {
  return pass(ep, Op::send, ctx, true, &desc, 1,
              [&](fid_ep* b, void** d) { return fi_senddata(b, buf, len, d[0], data, dest, ctx); });
}

ssize_t injectdata(fid_ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest) {
  return pass(ep, Op::send, nullptr, false, nullptr, 0,
              [&](fid_ep* b, void**) { return fi_injectdata(b, buf, len, data, dest); });
}

// ---- RMA ----

ssize_t read(fid_ep* ep, void* buf, size_t len, void* desc, fi_addr_t src, uint64_t addr,
             uint64_t key, void* ctx) {
  return pass(ep, Op::read, ctx, true, &desc, 1,
              [&](fid_ep* b, void** d) { return fi_read(b, buf, len, d[0], src, addr, key, ctx); });
}

ssize_t readv(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t src, uint64_t addr,
              uint64_t key, void* ctx) {
  return pass(ep, Op::read, ctx, true, desc, count,
              [&](fid_ep* b, void** d) { return fi_readv(b, iov, d, count, src, addr, key, ctx); });
}

ssize_t readmsg(fid_ep* ep, const fi_msg_rma* msg, uint64_t flags) {
  return pass(ep, Op::read, msg->context, true, msg->desc, msg->iov_count,
              [&](fid_ep* b, void** d) {
                fi_msg_rma m = *msg;
                m.desc = msg->desc != nullptr ? d : nullptr;
                return fi_readmsg(b, &m, flags);
              });
}

ssize_t write(fid_ep* ep, const void* buf, size_t len, void* desc, fi_addr_t dest, uint64_t addr,
              uint64_t key, void* ctx) {
  return pass(ep, Op::write, ctx, true, &desc, 1, [&](fid_ep* b, void** d) {
    return fi_write(b, buf, len, d[0], dest, addr, key, ctx);
  });
}

ssize_t writev(fid_ep* ep, const iovec* iov, void** desc, size_t count, fi_addr_t dest,
               uint64_t addr, uint64_t key, void* ctx) {
  return pass(ep, Op::write, ctx, true, desc, count, [&](fid_ep* b, void** d) {
    return fi_writev(b, iov, d, count, dest, addr, key, ctx);
  });
}

ssize_t writemsg(fid_ep* ep, const fi_msg_rma* msg, uint64_t flags) {
  return pass(ep, Op::write, msg->context, true, msg->desc, msg->iov_count,
              [&](fid_ep* b, void** d) {
                fi_msg_rma m = *msg;
                m.desc = msg->desc != nullptr ? d : nullptr;
                return fi_writemsg(b, &m, flags);
              });
}

ssize_t inject_write(fid_ep* ep, const void* buf, size_t len, fi_addr_t dest, uint64_t addr,
                     uint64_t key) {
  return pass(ep, Op::write, nullptr, false, nullptr, 0,
              [&](fid_ep* b, void**) { return fi_inject_write(b, buf, len, dest, addr, key); });
}

ssize_t writedata(fid_ep* ep, const void* buf, size_t len, void* desc, uint64_t data,
                  fi_addr_t dest, uint64_t addr, uint64_t key, void* ctx) {
  return pass(ep, Op::write, ctx, true, &desc, 1, [&](fid_ep* b, void** d) {
    return fi_writedata(b, buf, len, d[0], data, dest, addr, key, ctx);
  });
}

ssize_t inject_writedata(fid_ep* ep, const void* buf, size_t len, uint64_t data, fi_addr_t dest,
                         uint64_t addr, uint64_t key) {
  return pass(ep, Op::write, nullptr, false, nullptr, 0, [&](fid_ep* b, void**) {
    return fi_inject_writedata(b, buf, len, data, dest, addr, key);
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
