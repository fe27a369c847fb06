// libfabric error translation.
#include "fabric/error.hpp"

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "fabric/fid.hpp"
#include "core/log.hpp"

namespace xport::fabric {

Status fi_status(int ret, std::string_view what) {
  const int e = ret < 0 ? -ret : ret;
  Code code = Code::fabric;
  switch (e) {
    case FI_EAGAIN: code = Code::again; break;
    case FI_ENOMEM: code = Code::resource; break;
    case FI_ENODATA:
    case FI_ENOENT: code = Code::not_found; break;
    case FI_ENOSYS:
    case FI_EOPNOTSUPP: code = Code::unsupported; break;
    case FI_ETIMEDOUT: code = Code::timeout; break;
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_EHOSTUNREACH:
    case FI_ENOTCONN:
    case FI_ESHUTDOWN: code = Code::peer_lost; break;
    case FI_ETRUNC:
    case FI_ETOOSMALL: code = Code::truncated; break;
    case FI_EINVAL: code = Code::invalid_argument; break;
    case FI_EIO: code = Code::closed; break;  // the NIC or domain failed: its rail is unusable
    default: break;
  }
  return core::error(code, what, " failed: ", fi_strerror(e), " (", ret, ")");
}

void close_fid(fid_t fid, const char* what) {
  int ret = fi_close(fid);
  if (ret != 0) XPORT_LOG(warn, "fi_close failed for ", what, ": ", fi_strerror(-ret));
}

}  // namespace xport::fabric
