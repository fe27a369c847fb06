// Configuration of the strict provider from the environment, and the totals it prints at
// cleanup under STRICT_FI_VERBOSE=1 (one line per family of modes that was asked for or acted).
#include <strings.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "strict.hpp"

namespace strict {

Totals totals;

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && (std::strcmp(v, "1") == 0 || strcasecmp(v, "yes") == 0 ||
                          strcasecmp(v, "true") == 0 || strcasecmp(v, "on") == 0);
}

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

uint64_t env_count(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v || *end != '\0') {
    std::fprintf(stderr, "strict provider: ignoring %s=%s (not a count)\n", name, v);
    return 0;
  }
  return n;
}

unsigned env_ops(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return kAllOps;
  unsigned mask = 0;
  std::string s(v);
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string word = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (word == "send")
      mask |= static_cast<unsigned>(Op::send);
    else if (word == "recv")
      mask |= static_cast<unsigned>(Op::recv);
    else if (word == "write")
      mask |= static_cast<unsigned>(Op::write);
    else if (word == "read")
      mask |= static_cast<unsigned>(Op::read);
    else if (word == "atomic")
      mask |= static_cast<unsigned>(Op::atomic);
    else if (word == "any")
      mask |= kAllOps;
    else
      std::fprintf(stderr, "strict provider: ignoring '%s' in %s\n", word.c_str(), name);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return mask != 0 ? mask : kAllOps;
}

unsigned long long get(const std::atomic<uint64_t>& v) { return v.load(); }

}  // namespace

Config Config::from_env() {
  Config c;
  if (const char* b = std::getenv("STRICT_FI_BASE"); b != nullptr && *b != '\0') c.base = b;
  c.mr_endpoint = env_flag("STRICT_FI_MR_ENDPOINT");
  c.hide_atomic = env_flag("STRICT_FI_HIDE_ATOMIC");
  c.eagain_every = env_count("STRICT_FI_EAGAIN_EVERY");
  c.error_at = env_count("STRICT_FI_ERROR_AT");
  c.error_ops = env_ops("STRICT_FI_ERROR_OP");
  c.dead_at = env_count("STRICT_FI_DEAD_DOMAIN_AT");
  if (const char* v = std::getenv("STRICT_FI_CQ_DATA_SIZE"); v != nullptr && *v != '\0') {
    // Only the sizes real NICs have; anything else would silently test nothing.
    if (std::strcmp(v, "4") == 0)
      c.cq_data_size = 4;
    else if (std::strcmp(v, "8") == 0)
      c.cq_data_size = 8;
    else
      c.cq_data_size_bad = true;
  }
  c.rx_cq_data = env_flag("STRICT_FI_RX_CQ_DATA");
  c.reorder = env_flag("STRICT_FI_REORDER");
  c.seed_set = env_set("STRICT_FI_SEED");
  if (c.seed_set) c.seed = env_count("STRICT_FI_SEED");
  c.delay_us = env_count("STRICT_FI_DELAY_US");
  c.delay_post_us = env_count("STRICT_FI_DELAY_POST_US");
  if (const char* v = std::getenv("STRICT_FI_DELAY_DOMAIN")) c.delay_domain = v;
  c.cq_overrun = env_flag("STRICT_FI_CQ_OVERRUN");
  c.cq_fail_at = env_count("STRICT_FI_CQ_FAIL_AT");
  if (const char* v = std::getenv("STRICT_FI_FAULT_DOMAIN")) c.fault_domain = v;
  c.scribble = env_flag("STRICT_FI_SCRIBBLE");
  c.verbose = env_flag("STRICT_FI_VERBOSE");
  c.hmem = env_flag("STRICT_FI_HMEM");
  return c;
}

void print_totals(const Config& cfg) {
  std::fprintf(stderr,
               "strict provider: %llu posts; injected %llu -FI_EAGAIN, %llu error completions, "
               "%llu dead-domain failures; %llu FI_MR_ENDPOINT rejections; %llu endpoint closes "
               "refused with -FI_EBUSY\n",
               get(totals.posts), get(totals.eagain), get(totals.errors), get(totals.dead_fails),
               get(totals.mr_rejects), get(totals.mr_busy_closes));
  if (cfg.cq_data_size == 4 || get(totals.cq_data_refused) + get(totals.cq_data_masked) > 0) {
    std::fprintf(stderr,
                 "strict provider: 4-byte CQ data: %llu posts refused with -FI_EINVAL for data "
                 "above the low 32 bits; %llu completions had their data masked to 32 bits\n",
                 get(totals.cq_data_refused), get(totals.cq_data_masked));
  }
  if (cfg.rx_cq_data ||
      get(totals.rx_messages) + get(totals.rx_writes) + get(totals.rx_canceled) > 0) {
    std::fprintf(stderr,
                 "strict provider: FI_RX_CQ_DATA: %llu messages and %llu remote writes with data "
                 "consumed posted receives; %llu waited for a receive; %llu truncated; %llu "
                 "receives canceled\n",
                 get(totals.rx_messages), get(totals.rx_writes), get(totals.rx_waited),
                 get(totals.rx_truncated), get(totals.rx_canceled));
  }
  if (cfg.reorder || cfg.delay_us > 0 || cfg.delay_post_us > 0 ||
      get(totals.reordered) + get(totals.delayed_completions) + get(totals.delayed_posts) > 0) {
    std::fprintf(stderr,
                 "strict provider: reorder and delay: %llu completions handed out ahead of an "
                 "earlier one; %llu completions held back; %llu posts delayed (%llu refused by "
                 "the base when posted late)\n",
                 get(totals.reordered), get(totals.delayed_completions), get(totals.delayed_posts),
                 get(totals.delayed_post_errors));
  }
  if (cfg.cq_overrun || get(totals.overruns) > 0) {
    std::fprintf(stderr,
                 "strict provider: CQ overrun: %llu CQs overrun, %llu posts refused with -FI_EIO "
                 "after an overrun; at most %llu completions were outstanding on one CQ\n",
                 get(totals.overruns), get(totals.overrun_eio), get(totals.cq_peak));
  }
  if (cfg.hmem || get(totals.hmem_registrations) + get(totals.hmem_refused) > 0) {
    std::fprintf(stderr,
                 "strict provider: FI_HMEM: %llu FI_HMEM_CUDA registrations; %llu registrations "
                 "of device memory refused (FI_HMEM not granted); %llu operations on GPU memory "
                 "refused (no descriptor of its MR, or an inject); %llu sends from GPU memory "
                 "with its descriptor\n",
                 get(totals.hmem_registrations), get(totals.hmem_refused),
                 get(totals.hmem_op_rejects), get(totals.hmem_sends));
  }
}

// Tests read the counts of the provider loaded in their process (dlopen RTLD_NOLOAD + dlsym).
extern "C" __attribute__((visibility("default"))) void strict_fi_hmem_totals(uint64_t out[3]) {
  out[0] = totals.hmem_registrations.load();
  out[1] = totals.hmem_refused.load();
  out[2] = totals.hmem_op_rejects.load();
}
extern "C" __attribute__((visibility("default"))) uint64_t strict_fi_hmem_sends() {
  return totals.hmem_sends.load();
}

}  // namespace strict
