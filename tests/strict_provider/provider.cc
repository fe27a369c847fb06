// Entry point of the strict provider (libstrict-fi.so, found through FI_PROVIDER_PATH): its
// fi_provider, the environment configuration, and fi_getinfo answered by the base provider.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "strict.hpp"

namespace strict {

namespace {

// Capabilities whose operations this layer does not interpose: never advertised.
constexpr uint64_t kUnwrappedCaps = FI_TAGGED | FI_COLLECTIVE | FI_MULTICAST | FI_TRIGGER |
                                    FI_MULTI_RECV | FI_RMA_EVENT | FI_NAMED_RX_CTX;

// Nested fi_getinfo from inside our getinfo is fine in libfabric 1.17 (fi_ini's lock is released
// before providers are asked, and ofi_rxm does the same to find its core provider); libfabric's
// layering filter already skips "strict" when the hints name the base, and this guard keeps a
// misconfigured STRICT_FI_BASE=strict from recursing.
thread_local bool in_getinfo = false;

void strip_caps(fi_info* i, uint64_t caps) {
  i->caps &= ~caps;
  if (i->tx_attr != nullptr) i->tx_attr->caps &= ~caps;
  if (i->rx_attr != nullptr) i->rx_attr->caps &= ~caps;
}

int getinfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info) {
  *info = nullptr;
  if (in_getinfo) return -FI_ENODATA;
  const Config cfg = Config::from_env();
  if (cfg.base.empty() || cfg.base.find("strict") != std::string::npos) return -FI_ENODATA;

  if (cfg.cq_data_size_bad) {
    std::fprintf(stderr,
                 "strict provider: STRICT_FI_CQ_DATA_SIZE=%s: only 4 and 8 are "
                 "accepted; offering nothing\n",
                 std::getenv("STRICT_FI_CQ_DATA_SIZE"));
    return -FI_ENODATA;
  }
  // Held receives are matched in arrival order only: no receives from a named source.
  uint64_t refused_caps = kUnwrappedCaps | (cfg.hide_atomic ? FI_ATOMIC : 0) |
                          (cfg.rx_cq_data ? FI_DIRECTED_RECV : 0) | (cfg.hmem ? 0 : FI_HMEM);
  // STRICT_FI_HMEM: FI_HMEM to whoever asks for it (or asks for no capability in particular),
  // with FI_MR_HMEM: the application must then pass descriptors for every GPU buffer.
  const bool asks_hmem = hints != nullptr && (hints->caps & FI_HMEM) != 0;
  const bool offer_hmem = cfg.hmem && (hints == nullptr || hints->caps == 0 || asks_hmem);
  if (hints != nullptr) {
    if (hints->caps & refused_caps) return -FI_ENODATA;
    if (hints->ep_attr != nullptr && hints->ep_attr->type != FI_EP_UNSPEC &&
        hints->ep_attr->type != FI_EP_RDM)
      return -FI_ENODATA;  // reliable datagram endpoints only
    // An application that cannot bind MRs to endpoints must not get a domain that requires it.
    if (cfg.mr_endpoint && hints->domain_attr != nullptr &&
        !(hints->domain_attr->mr_mode & FI_MR_ENDPOINT))
      return -FI_ENODATA;
    // Nor one that wants more CQ data than the NIC carries, or cannot post a receive for each
    // write with data.
    if (hints->domain_attr != nullptr && hints->domain_attr->cq_data_size > cfg.cq_data_size)
      return -FI_ENODATA;
    if (cfg.rx_cq_data && !(hints->mode & FI_RX_CQ_DATA)) return -FI_ENODATA;
    if (asks_hmem && hints->domain_attr != nullptr && hints->domain_attr->mr_mode != 0 &&
        !(hints->domain_attr->mr_mode & FI_MR_HMEM))
      return -FI_ENODATA;  // FI_HMEM comes with FI_MR_HMEM here
    if (cfg.rx_cq_data && hints->ep_attr != nullptr && hints->ep_attr->max_msg_size > kRxSlotSize)
      return -FI_ENODATA;
  }

  fi_info* base_hints = fi_dupinfo(hints);  // fi_dupinfo(nullptr) allocates empty hints
  if (base_hints == nullptr) return -FI_ENOMEM;
  free(base_hints->fabric_attr->prov_name);
  base_hints->fabric_attr->prov_name = strdup(cfg.base.c_str());
  base_hints->ep_attr->type = FI_EP_RDM;
  base_hints->domain_attr->mr_mode &= ~(FI_MR_ENDPOINT | FI_MR_HMEM);
  strip_caps(base_hints, FI_HMEM);  // this layer offers it; the base registers host memory
  if (hints == nullptr)
    base_hints->domain_attr->mr_mode = ~(FI_MR_BASIC | FI_MR_SCALABLE) & ~FI_MR_ENDPOINT;
  if (cfg.rx_cq_data) {
    // This layer consumes the receives itself: a base that needs FI_RX_CQ_DATA would take its
    // internal buffers for writes, so only bases that do not are asked.
    base_hints->mode &= ~FI_RX_CQ_DATA;
    if (base_hints->rx_attr != nullptr) base_hints->rx_attr->mode &= ~FI_RX_CQ_DATA;
  }

  fi_info* list = nullptr;
  in_getinfo = true;
  int ret = fi_getinfo(version, node, service, flags, base_hints, &list);
  in_getinfo = false;
  fi_freeinfo(base_hints);
  if (ret != 0) return ret;

  fi_info* head = nullptr;
  fi_info* tail = nullptr;
  for (fi_info* cur = list; cur != nullptr;) {
    fi_info* next = cur->next;
    cur->next = nullptr;
    const bool keep =
        cur->ep_attr->type == FI_EP_RDM && !(cur->domain_attr->mr_mode & FI_MR_ENDPOINT);
    if (!keep) {
      fi_freeinfo(cur);
    } else {
      strip_caps(cur, refused_caps);
      if (cfg.mr_endpoint) cur->domain_attr->mr_mode |= FI_MR_ENDPOINT;
      if (offer_hmem) {
        cur->caps |= FI_HMEM;
        if (cur->tx_attr != nullptr) cur->tx_attr->caps |= FI_HMEM;
        if (cur->rx_attr != nullptr) cur->rx_attr->caps |= FI_HMEM;
        cur->domain_attr->mr_mode |= FI_MR_HMEM;
      }
      cur->domain_attr->cq_data_size = std::min(cur->domain_attr->cq_data_size, cfg.cq_data_size);
      if (cfg.rx_cq_data) {
        cur->mode |= FI_RX_CQ_DATA;
        if (cur->rx_attr != nullptr) cur->rx_attr->mode |= FI_RX_CQ_DATA;
        // A message lands in one of the internal receive buffers first.
        cur->ep_attr->max_msg_size = std::min(cur->ep_attr->max_msg_size, kRxSlotSize);
      }
      // libfabric names the entry after us ("strict") only when prov_name is left empty.
      free(cur->fabric_attr->prov_name);
      cur->fabric_attr->prov_name = nullptr;
      if (tail != nullptr)
        tail->next = cur;
      else
        head = cur;
      tail = cur;
    }
    cur = next;
  }
  *info = head;
  return head != nullptr ? 0 : -FI_ENODATA;
}

void cleanup() {
  const Config cfg = Config::from_env();
  if (cfg.verbose) print_totals(cfg);
}

fi_provider provider = {
    .version = FI_VERSION(1, 0),
    .fi_version = FI_VERSION(1, 17),
    .context = {},
    .name = "strict",
    .getinfo = getinfo,
    .fabric = open_fabric,
    .cleanup = cleanup,
};

}  // namespace

bool is_strict_error(int prov_errno) {
  return prov_errno >= kErrInjected && prov_errno <= kErrMrHmem;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::send:
      return "send";
    case Op::recv:
      return "recv";
    case Op::write:
      return "write";
    case Op::read:
      return "read";
    case Op::atomic:
      return "atomic";
  }
  return "?";
}

uint64_t completion_flags(Op op) {
  switch (op) {
    case Op::send:
      return FI_SEND | FI_MSG;
    case Op::recv:
      return FI_RECV | FI_MSG;
    case Op::write:
      return FI_RMA | FI_WRITE;
    case Op::read:
      return FI_RMA | FI_READ;
    case Op::atomic:
      return FI_ATOMIC | FI_WRITE;
  }
  return 0;
}

fi_info* to_base_info(const fi_info* info, const std::string& base_name) {
  fi_info* b = fi_dupinfo(info);
  if (b == nullptr) return nullptr;
  b->next = nullptr;
  free(b->fabric_attr->prov_name);
  b->fabric_attr->prov_name = strdup(base_name.c_str());
  if (b->fabric_attr->prov_name == nullptr) {
    fi_freeinfo(b);
    return nullptr;
  }
  b->domain_attr->mr_mode &= ~(FI_MR_ENDPOINT | FI_MR_HMEM);
  strip_caps(b, FI_HMEM);
  return b;
}

}  // namespace strict

extern "C" FI_EXT_INI { return &strict::provider; }
