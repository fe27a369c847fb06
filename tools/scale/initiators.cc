// xport-scale's initiator host (initiators.hpp): opens its share of the initiator devices, then
// opens windows (or connects), issues rounds, latency samples and sends as the target asks.
#include "initiators.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "common.hpp"
#include "xport/xport.hpp"

namespace scale {
namespace {

using namespace xport;

struct Initiator {
  size_t index = 0;  // among all N
  std::unique_ptr<Device> dev;
  uint8_t* buf = nullptr;
  size_t len = 0;
  Region region;
  RemoteRegion key;  // one-sided: the target's region, imported on this device
  std::unique_ptr<Window> win;
  std::unique_ptr<SendComm> comm;
  bool live = false;  // its window (comm) opened, and nothing of it failed since

  ~Initiator() {
    win.reset();
    comm.reset();
    region = Region();
    key = RemoteRegion();
    dev.reset();
    std::free(buf);
  }
};

// What the workers of one step report: the slowest operation, the initiators that failed, the
// first error, and every distinct error with how many initiators had it (NOTE lines).
struct Outcome {
  struct Kind {
    size_t count = 0, first = 0;
    std::string code, text;
  };
  std::mutex mu;
  std::vector<size_t> bad;
  std::string error, code;
  std::map<std::string, Kind> kinds;  // by the error's text, its numbers left out
  uint64_t max_ns = 0;
  size_t slowest = 0;

  void fail(Initiator& in, const Status& s) {
    std::lock_guard<std::mutex> l(mu);
    in.live = false;
    bad.push_back(in.index);
    const std::string text = one_line(s.to_string());
    if (error.empty()) {
      error = "initiator " + std::to_string(in.index) + ": " + text;
      code = code_name(s.code());
    }
    Kind& k = kinds[error_shape(text)];
    if (k.count == 0 || in.index < k.first) {
      k.first = in.index;
      k.text = text;  // the first initiator's words
    }
    k.count += 1;
    k.code = code_name(s.code());
  }
  void took(uint64_t ns, size_t index) {
    std::lock_guard<std::mutex> l(mu);
    if (ns >= max_ns) {
      max_ns = ns;
      slowest = index;
    }
  }
  // One NOTE line per distinct error of `step`, each ending in a newline: they go just before
  // the step's answer.
  std::string notes(const std::string& step) const {
    std::string s;
    for (const auto& [key, k] : kinds) {
      s += "NOTE step=" + step + " count=" + std::to_string(k.count) +
           " first=" + std::to_string(k.first) + " code=" + k.code + " error=" + k.text + "\n";
    }
    return s;
  }
  std::string tail() {
    std::sort(bad.begin(), bad.end());
    std::string s = " bad=" + index_list(bad);
    if (!code.empty()) s += " code=" + code;
    if (!error.empty()) s += " error=" + error;
    return s;
  }
};

// fn(lo, hi) over [0, count) split among at most `threads` threads (one: this thread).
void in_threads(size_t count, int threads, const std::function<void(size_t, size_t)>& fn) {
  const size_t t = std::max<size_t>(1, std::min(count, static_cast<size_t>(threads)));
  if (t == 1) {
    fn(0, count);
    return;
  }
  std::vector<std::thread> pool;
  for (size_t k = 0; k < t; ++k) pool.emplace_back(fn, k * count / t, (k + 1) * count / t);
  for (auto& th : pool) th.join();
}

class Host {
 public:
  Host(bench::LineChannel& ch, const Options& opt) : ch_(ch), opt_(opt) {}

  int serve() {
    const auto wait = std::chrono::seconds(opt_.timeout_s);
    auto hello = ch_.recv(Deadline::after(wait));
    if (!hello.ok()) return 1;
    if (Status s = start(*hello); !s.ok()) {
      (void)ch_.send("FAIL error=" + one_line(s.to_string()));
      return 1;
    }
    for (;;) {
      // The target's longest step between two lines is a phase of the others (each within
      // the timeout) plus its idle passes: ten timeouts is ample; its end closes the pipe.
      auto line = ch_.recv(Deadline::after(wait * 10));
      if (!line.ok()) return 1;
      const auto w = words(*line);
      if (w.empty()) continue;
      std::string answer;
      if (w[0] == "OPEN" || w[0] == "CONNECT") {
        answer = open();
      } else if (w[0] == "ROUND" && w.size() == 2) {
        answer = round(std::strtoull(w[1].c_str(), nullptr, 10));
      } else if (w[0] == "PING" && w.size() == 3) {
        answer = ping(std::strtoull(w[1].c_str(), nullptr, 10),
                      std::strtoull(w[2].c_str(), nullptr, 10));
      } else if (w[0] == "SEND" && w.size() == 3) {
        answer = send(std::strtoull(w[1].c_str(), nullptr, 10),
                      std::strtoull(w[2].c_str(), nullptr, 10));
      } else if (w[0] == "STATS") {
        answer = stats();
      } else if (w[0] == "BYE") {
        // Closed in parallel as they were opened: each window or comm close is its own wait.
        in_threads(inits_.size(), opt_.threads, [&](size_t lo, size_t hi) {
          for (size_t k = lo; k < hi; ++k) inits_[k].reset();
        });
        inits_.clear();
        return ch_.send("BYE").ok() ? 0 : 1;
      } else {
        (void)ch_.send("FAIL error=unknown command '" + line->substr(0, 40) + "'");
        return 1;
      }
      if (!ch_.send(answer).ok()) return 1;
    }
  }

 private:
  Deadline step_deadline() const { return Deadline::after(std::chrono::seconds(opt_.timeout_s)); }

  Status start(const std::string& hello) {
    const auto w = words(hello);
    if (w.empty() || w[0] != "HELLO") return Status(Code::protocol, "expected HELLO");
    one_sided_ = field(w, "mode") == "one";
    peers_ = field_u64(w, "peers");
    first_ = field_u64(w, "first");
    count_ = field_u64(w, "count");
    size_ = field_u64(w, "size");
    threads_ = static_cast<int>(field_u64(w, "threads"));
    corrupt_ = std::strtoll(field(w, "corrupt").c_str(), nullptr, 10);
    XPORT_ASSIGN_OR_RETURN(auto blob, bench::unhex(field(w, one_sided_ ? "key" : "handle")));
    if (peers_ == 0 || count_ == 0 || size_ == 0 || threads_ < 1 || blob.empty()) {
      return Status(Code::protocol, "malformed HELLO '" + hello.substr(0, 80) + "'");
    }
    ContextOptions co;
    co.provider = opt_.provider;
    co.peers_on_host = true;
    Outcome out;
    auto ctx = Context::open(co);
    if (ctx.ok()) ctx_ = std::move(ctx).value();
    const uint64_t rss0 = resident_bytes();
    uint64_t reg = 0;
    Status failed = ctx.ok() ? Status() : ctx.status();
    for (size_t k = 0; k < count_ && failed.ok(); ++k) {
      auto in = std::make_unique<Initiator>();
      in->index = first_ + k;
      DeviceOptions d;
      d.rails = opt_.nics;
      auto dev = ctx_->open_device(d);
      if (!dev.ok()) {
        failed = dev.status();
        break;
      }
      in->dev = std::move(dev).value();
      const Stats st = in->dev->stats();
      reg += st.registered_bytes + st.pool.registered_bytes;
      inits_.push_back(std::move(in));
    }
    const uint64_t rss1 = resident_bytes();
    // Devices that did not open are failed in every step's answer.
    for (size_t k = inits_.size(); k < count_; ++k) {
      Initiator none;
      none.index = first_ + k;
      out.fail(none, failed.with_context("opening initiator device " + std::to_string(first_ + k)));
    }
    for (auto& in : inits_) {
      in->len = size_;
      in->buf = static_cast<uint8_t*>(std::aligned_alloc(4096, (size_ + 4095) / 4096 * 4096));
      if (in->buf == nullptr) return Status(Code::resource, "out of memory for send buffers");
      std::memset(in->buf, 0, size_);
      XPORT_ASSIGN_OR_RETURN(in->region, in->dev->register_memory(in->buf, size_));
      if (one_sided_) {
        XPORT_ASSIGN_OR_RETURN(in->key, in->dev->import_key(blob));
      }
    }
    blob_ = std::move(blob);
    never_opened_ = out.bad;
    first_error_ = out.error;
    first_code_ = out.code;
    std::string line = "READY devices=" + std::to_string(inits_.size()) +
                       " rss0=" + std::to_string(rss0) + " rss1=" + std::to_string(rss1) +
                       " reg=" + std::to_string(reg);
    if (!first_error_.empty()) line += " code=" + first_code_ + " error=" + first_error_;
    return ch_.send(out.notes("device") + line);
  }

  // The devices that never opened belong in every answer's bad list.
  void add_never_opened(Outcome& out) {
    out.bad.insert(out.bad.end(), never_opened_.begin(), never_opened_.end());
    if (out.error.empty()) {
      out.error = first_error_;
      out.code = first_code_;
    }
  }

  uint64_t registered() const {
    uint64_t sum = 0;
    for (const auto& in : inits_) {
      const Stats st = in->dev->stats();
      sum += st.registered_bytes + st.pool.registered_bytes;
    }
    return sum;
  }

  std::string open() {
    Outcome out;
    const uint64_t rss0 = resident_bytes(), reg0 = registered();
    const Deadline dl = step_deadline();
    ConnectionHandle handle(blob_.begin(), blob_.end());
    in_threads(inits_.size(), threads_, [&](size_t lo, size_t hi) {
      for (size_t k = lo; k < hi; ++k) {
        Initiator& in = *inits_[k];
        const uint64_t t0 = now_ns();
        if (one_sided_) {
          auto w = Window::open(*in.dev, in.key, dl);
          if (w.ok()) in.win = std::move(w).value();
          if (!w.ok()) out.fail(in, w.status());
        } else {
          auto c = in.dev->connect(handle, dl);
          if (c.ok()) in.comm = std::move(c).value();
          if (!c.ok()) out.fail(in, c.status());
        }
        out.took(now_ns() - t0, in.index);
        in.live = in.win != nullptr || in.comm != nullptr;
      }
    });
    size_t ok = 0;
    for (auto& in : inits_) ok += in->live ? 1 : 0;
    std::string notes = out.notes(one_sided_ ? "open" : "connect");
    add_never_opened(out);
    return notes + "OPENED ok=" + std::to_string(ok) +
           " max_us=" + std::to_string(out.max_ns / 1000) +
           " slowest=" + std::to_string(out.slowest) + " rss0=" + std::to_string(rss0) +
           " rss=" + std::to_string(resident_bytes()) + " reg0=" + std::to_string(reg0) +
           " reg=" + std::to_string(registered()) + out.tail();
  }

  // What initiator `in` sends in `round`: the pattern, wrong in one byte where a test asks.
  void fill(Initiator& in, size_t len, uint64_t round) {
    fill_pattern(in.buf, len, in.index, round, len);
    if (in.index == 0 && static_cast<int64_t>(round) == corrupt_) in.buf[len - 1] ^= 0x5a;
  }

  Status put_one(Initiator& in, uint64_t round) {
    fill(in, size_, round);
    return in.win
        ->put_signal(in.region, 0, in.key, slot_offset(in.index, size_), size_, in.key,
                     word_offset(in.index, peers_, size_), 1)
        .status();
  }

  std::string round(uint64_t r) {
    Outcome out;
    const Deadline dl = step_deadline();
    in_threads(inits_.size(), threads_, [&](size_t lo, size_t hi) {
      // Every put_signal first, then the quiets: the windows' operations overlap.
      for (size_t k = lo; k < hi; ++k) {
        Initiator& in = *inits_[k];
        if (!in.live) continue;
        if (Status s = put_one(in, r); !s.ok()) out.fail(in, s.with_context("put_signal"));
      }
      for (size_t k = lo; k < hi; ++k) {
        Initiator& in = *inits_[k];
        if (!in.live) continue;
        if (Status s = in.win->quiet(dl); !s.ok()) out.fail(in, s.with_context("quiet"));
      }
    });
    return out.notes("round") + "DONE " + std::to_string(r) + out.tail();
  }

  std::string ping(uint64_t peer, uint64_t r) {
    std::string head = "PONG " + std::to_string(peer);
    if (peer < first_ || peer >= first_ + inits_.size() || !inits_[peer - first_]->live) {
      return head + " t0=0 error=initiator " + std::to_string(peer) + " is not open here";
    }
    Initiator& in = *inits_[peer - first_];
    fill(in, size_, r);
    const uint64_t t0 = now_ns();
    Status s = in.win
                   ->put_signal(in.region, 0, in.key, slot_offset(in.index, size_), size_, in.key,
                                word_offset(in.index, peers_, size_), 1)
                   .status();
    if (s.ok()) s = in.win->quiet(step_deadline());
    if (!s.ok()) in.live = false;
    head += " t0=" + std::to_string(t0);
    return s.ok() ? head : head + " error=" + one_line(s.to_string());
  }

  std::string send(uint64_t size, uint64_t r) {
    Outcome out;
    const Deadline dl = step_deadline();
    if (size > size_ || size < 8)
      return "FAIL error=SEND of a size outside 8.." + std::to_string(size_);
    in_threads(inits_.size(), threads_, [&](size_t lo, size_t hi) {
      std::vector<std::pair<Initiator*, Request>> pending;
      for (size_t k = lo; k < hi; ++k) {
        Initiator& in = *inits_[k];
        if (!in.live) continue;
        fill(in, size, r);
        const uint64_t id = in.index;
        std::memcpy(in.buf, &id, 8);  // the target learns which comm is whose from it
        auto req = in.comm->isend(in.buf, size, in.region);
        if (!req.ok()) {
          out.fail(in, req.status().with_context("isend"));
          continue;
        }
        pending.emplace_back(&in, *req);
      }
      // Tested in turn, each test a progress pass of its own device: every device moves,
      // whatever order the target serves the comms in.
      while (!pending.empty()) {
        for (size_t k = 0; k < pending.size();) {
          auto c = pending[k].first->comm->test(pending[k].second);
          if (c.ok() && !c->done && !dl.expired()) {
            ++k;
            continue;
          }
          if (!c.ok()) out.fail(*pending[k].first, c.status().with_context("send"));
          if (c.ok() && !c->done) {
            out.fail(*pending[k].first,
                     Status(Code::timeout, "send: not complete within the timeout"));
          }
          pending[k] = pending.back();
          pending.pop_back();
        }
      }
    });
    return out.notes("send") + "SENT " + std::to_string(size) + " " + std::to_string(r) +
           out.tail();
  }

  std::string stats() {
    uint64_t held = 0, deferred = 0;
    for (auto& in : inits_) {
      const Stats s = in->dev->stats();
      held += s.window_ops_held;
      deferred += s.deferred_posts;
    }
    return "STATS held=" + std::to_string(held) + " deferred=" + std::to_string(deferred);
  }

  bench::LineChannel& ch_;
  const Options& opt_;
  bool one_sided_ = true;
  size_t peers_ = 0, first_ = 0, count_ = 0, size_ = 0;
  int threads_ = 1;
  int64_t corrupt_ = -1;       // --test-corrupt: the round in which initiator 0 sends a wrong byte
  std::vector<uint8_t> blob_;  // the target's key (one-sided) or listener handle (two-sided)
  std::unique_ptr<Context> ctx_;
  std::vector<std::unique_ptr<Initiator>> inits_;  // declared after ctx_: closed before it
  std::vector<size_t> never_opened_;
  std::string first_error_, first_code_;
};

}  // namespace

int run_initiators(bench::LineChannel& ch, const Options& opt) {
  Host host(ch, opt);
  return host.serve();
}

}  // namespace scale
