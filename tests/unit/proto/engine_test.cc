// The engine without a second process: one engine connected to itself over shm (or two, one of
// which never progresses), with forged messages and CQ data injected where progress would hand
// them over. Routing never reaches the wrong communicator or request: unknown comms, older
// generations, wrong peers, out-of-range slots and forged acknowledgements are counted as
// misses and change nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "fabric/provider.hpp"
#include "proto/engine.hpp"

namespace xport::proto {
namespace {

using namespace std::chrono_literals;

Deadline soon() { return Deadline::after(20s); }

class EngineTest : public ::testing::Test {
 protected:
  // shm between engines of one process is fragile at teardown (an engine's shm region goes with
  // it while the other may still send or read there): tests with two engines use tcp;ofi_rxm.
  virtual const char* provider() const { return "shm"; }
  virtual uint32_t pool_channels() const { return 4; }
  virtual int64_t spin_gather_ns() const { return -1; }  // auto
  void SetUp() override {
    fabric::ProviderRequest req;
    req.provider = provider();
    req.peers_on_host = true;
    auto sel = fabric::select_provider(req);
    if (!sel) GTEST_SKIP() << "no " << provider() << " provider: " << sel.status().to_string();
    sel_ = std::move(sel).value();
    a_ = open_engine();
  }

  std::shared_ptr<Engine> open_engine() {
    EngineConfig cfg;
    cfg.max_requests = 8;
    cfg.eager_max = 4096;
    cfg.pool_channels = pool_channels();
    cfg.spin_gather_knob = spin_gather_ns();
    auto e = Engine::open({sel_.info.get()}, sel_.report.caps, cfg);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  // A pair of communicators of `a_` connected to itself.
  void connect_self() {
    auto l = a_->connections().listen();
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    token_ = l->token;
    auto s = a_->connections().connect(l->handle, soon());
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    send_ = *s;
    auto r = a_->connections().accept(l->token, soon());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    recv_ = *r;
  }

  LocalBuffer local(std::vector<uint8_t>& mem) {
    auto r = a_->memory().register_memory(mem.data(), mem.size());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    regions_.push_back(std::move(r).value());
    return LocalBuffer{&regions_.back(), mem.data(), mem.size()};
  }

  uint64_t misses() { return a_->stats().routing_misses; }

  MsgHeader header(MsgType t, CommId dst, CommId src, uint64_t seq) {
    MsgHeader h{};
    h.type = static_cast<uint8_t>(t);
    h.version = kWireVersion;
    h.dst_comm = dst.index;
    h.dst_gen = dst.gen;
    h.src_comm = src.index;
    h.src_gen = src.gen;
    h.slot = static_cast<uint16_t>(seq % 8);
    h.seq = seq;
    return h;
  }
  void inject(const MsgHeader& h, const std::vector<uint8_t>& body = {}) {
    std::vector<uint8_t> bytes(sizeof(h) + body.size());
    std::memcpy(bytes.data(), &h, sizeof(h));
    if (!body.empty()) std::memcpy(bytes.data() + sizeof(h), body.data(), body.size());
    a_->inject_message(0, bytes.data(), bytes.size());
  }

  void TearDown() override {
    regions_.clear();
    a_.reset();
    b_.reset();  // after a_, whose shutdown may still send to it (shm maps the peer's memory)
  }

  fabric::SelectedProvider sel_;
  std::shared_ptr<Engine> a_;
  std::shared_ptr<Engine> b_;
  std::deque<RegionRef> regions_;
  uint64_t token_ = 0;
  CommId send_, recv_;
};

// test() without a progress pass (TestMode::observe, as the NCCL plugin's lanes use it): a
// rendezvous exchange completes only through progress made by another thread, and the test
// calls made meanwhile never fail, never block for long and report the right sizes.
TEST_F(EngineTest, TestWithoutProgressSeesWhatAnotherThreadProgressed) {
  connect_self();
  std::vector<uint8_t> out(64 * 1024), in(64 * 1024, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + 1);
  LocalBuffer lo = local(out), li = local(in);
  auto r = a_->two_sided().irecv(recv_, in.data(), in.size(), li);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto s = a_->two_sided().isend(send_, out.data(), out.size(), lo, 0);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  std::atomic<bool> stop{false};
  std::thread helper([&] {
    while (!stop.load()) EXPECT_TRUE(a_->progress().ok());
  });
  bool rdone = false, sdone = false;
  size_t rbytes = 0, sbytes = 0;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while ((!rdone || !sdone) && std::chrono::steady_clock::now() < until) {
    if (!rdone) {
      auto c = a_->two_sided().test(recv_, *r, false);
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      rdone = c->done;
      rbytes = c->bytes;
    }
    if (!sdone) {
      auto c = a_->two_sided().test(send_, *s, false);
      ASSERT_TRUE(c.ok()) << c.status().to_string();
      sdone = c->done;
      sbytes = c->bytes;
    }
  }
  stop.store(true);
  helper.join();
  ASSERT_TRUE(rdone && sdone) << "not complete within 20 s of another thread's progress (receive "
                              << rdone << ", send " << sdone << ")";
  EXPECT_EQ(rbytes, out.size());
  EXPECT_EQ(sbytes, out.size());
  EXPECT_EQ(in, out);
}

// Operations posted: on the rails' endpoints and on the pool's channels.
uint64_t ops_posted(const Stats& st) {
  uint64_t n = st.pool.channel_ops;
  for (const EndpointStats& e : st.endpoints) n += e.posted;
  return n;
}

// PostMode::handoff (the NCCL plugin's lanes): an isend whose clear-to-send is already in posts
// none of its writes in the call (the thread driving progress does, in its next pass), and a
// handoff call never waits for the engine: while another thread holds it, Code::again and
// nothing started.
TEST_F(EngineTest, AHandoffSendLeavesItsWritesToTheNextProgressPass) {
  connect_self();
  std::vector<uint8_t> out(64 * 1024), in(64 * 1024, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 13 + 5);
  LocalBuffer lo = local(out), li = local(in);
  {
    // A first message the usual way: the provider's first write to a peer may be refused
    // (shm maps the peer's region first), which queues it whatever the mode.
    auto r0 = a_->two_sided().irecv(recv_, in.data(), in.size(), li);
    ASSERT_TRUE(r0.ok()) << r0.status().to_string();
    auto s0 = a_->two_sided().isend(send_, out.data(), out.size(), lo);
    ASSERT_TRUE(s0.ok()) << s0.status().to_string();
    ASSERT_TRUE(a_->two_sided().wait(recv_, *r0, soon()).ok());
    ASSERT_TRUE(a_->two_sided().wait(send_, *s0, soon()).ok());
    std::fill(in.begin(), in.end(), 0);
  }
  auto r = a_->two_sided().irecv(recv_, in.data(), in.size(), li, 0, true);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // The clear-to-send reaches the sender's side by progress.
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (!a_->early_cts_for_test(send_, 1) && std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(a_->progress().ok());
  }
  ASSERT_TRUE(a_->early_cts_for_test(send_, 1)) << "the clear-to-send did not arrive within 20 s";
  {
    auto held = a_->lock_for_test();
    std::thread other([&] {
      auto busy = a_->two_sided().isend(send_, out.data(), out.size(), lo, 0, true);
      ASSERT_FALSE(busy.ok()) << "a handoff isend waited for (or got) a held engine";
      EXPECT_EQ(busy.status().code(), Code::again) << busy.status().to_string();
      EXPECT_NE(busy.status().message().find("busy"), std::string::npos)
          << busy.status().to_string();
      auto busy_recv = a_->two_sided().irecv(recv_, in.data(), in.size(), li, 0, true);
      ASSERT_FALSE(busy_recv.ok());
      EXPECT_EQ(busy_recv.status().code(), Code::again) << busy_recv.status().to_string();
    });
    other.join();
  }
  EXPECT_TRUE(a_->early_cts_for_test(send_, 1)) << "a refused handoff isend consumed the CTS";
  const uint64_t before = ops_posted(a_->stats());
  auto s = a_->two_sided().isend(send_, out.data(), out.size(), lo, 0, true);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(*s, 1u) << "the refused isend took a sequence number";
  EXPECT_EQ(ops_posted(a_->stats()), before) << "the handoff isend posted its writes itself";
  auto t = a_->two_sided().test(send_, *s, false);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_FALSE(t->done);
  // Progress posts them (once the CQ has room for their completions).
  const auto until_posted = std::chrono::steady_clock::now() + 20s;
  while (ops_posted(a_->stats()) == before && std::chrono::steady_clock::now() < until_posted) {
    ASSERT_TRUE(a_->progress().ok());
  }
  EXPECT_GT(ops_posted(a_->stats()), before) << "progress posted no write within 20 s";
  auto rb = a_->two_sided().wait(recv_, *r, soon());
  ASSERT_TRUE(rb.ok()) << rb.status().to_string();
  EXPECT_EQ(*rb, out.size());
  auto sb = a_->two_sided().wait(send_, *s, soon());
  ASSERT_TRUE(sb.ok()) << sb.status().to_string();
  EXPECT_EQ(in, out);
}

// XPORT_SPIN_GATHER_NS: auto gathers on shm only; a number is taken as it is, within 100 µs.
TEST(EngineConfigTest, SpinGatherIsAMicrosecondOnShmAndNoneElsewhereUnlessSet) {
  EngineConfig c;
  c.spin_gather_knob = -1;
  EXPECT_EQ(c.spin_gather_for("shm"), std::chrono::nanoseconds(1000));
  EXPECT_EQ(c.spin_gather_for("tcp;ofi_rxm"), std::chrono::nanoseconds(0));
  EXPECT_EQ(c.spin_gather_for("sockets"), std::chrono::nanoseconds(0));
  EXPECT_EQ(c.spin_gather_for("tcp"), std::chrono::nanoseconds(0));
  c.spin_gather_knob = 0;
  EXPECT_EQ(c.spin_gather_for("shm"), std::chrono::nanoseconds(0));
  c.spin_gather_knob = 250;
  EXPECT_EQ(c.spin_gather_for("tcp;ofi_rxm"), std::chrono::nanoseconds(250));
  c.spin_gather_knob = 5'000'000'000;
  EXPECT_EQ(c.spin_gather_for("shm"), std::chrono::nanoseconds(100000));
}

// A gather far longer than any message's handling (50 µs after every productive pass): eager,
// rendezvous and zero-byte messages still arrive intact and in order, and every wait ends.
class GatheringEngine : public EngineTest {
 protected:
  int64_t spin_gather_ns() const override { return 50000; }
};

TEST_F(GatheringEngine, MessagesArriveIntactWhileWaitsGatherAfterEachProductivePass) {
  connect_self();
  const size_t sizes[] = {8, 0, 4096, 64 * 1024, 8, 200 * 1024};
  std::vector<uint8_t> out(256 * 1024), in(256 * 1024);
  LocalBuffer lo = local(out), li = local(in);
  for (int i = 0; i < 120; ++i) {
    const size_t n = sizes[i % 6];
    for (size_t k = 0; k < n; ++k) out[k] = static_cast<uint8_t>(k * 7 + i);
    std::fill(in.begin(), in.end(), 0xee);
    auto r = a_->two_sided().irecv(recv_, in.data(), in.size(), li);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    auto s = a_->two_sided().isend(send_, out.data(), n, lo);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    auto got = a_->two_sided().wait(recv_, *r, soon());
    ASSERT_TRUE(got.ok()) << "message " << i << " (" << n << " bytes): " << got.status().to_string();
    ASSERT_EQ(*got, n) << "message " << i;
    auto sent = a_->two_sided().wait(send_, *s, soon());
    ASSERT_TRUE(sent.ok()) << "message " << i << ": " << sent.status().to_string();
    ASSERT_TRUE(std::equal(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), in.begin()))
        << "message " << i << " (" << n << " bytes) arrived altered";
    ASSERT_EQ(in[n], 0xee) << "message " << i << " wrote past its " << n << " bytes";
  }
}

TEST_F(EngineTest, WriteDataOfAnotherGenerationOrSlotReachesNobody) {
  connect_self();
  std::vector<uint8_t> buf(64 << 10);
  auto lb = local(buf);
  auto r =
      a_->two_sided().irecv(recv_, buf.data(), buf.size(), lb);  // rendezvous-sized: CTS goes out
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const uint64_t before = misses();
  const uint32_t len = 1000;
  // The right communicator index, an older generation: the write was for its previous owner.
  a_->inject_cq_data(0, encode_cq_data({recv_.index, 0, static_cast<uint8_t>(recv_.gen + 15), len}, 8),
                     nullptr, len, false);
  // A slot beyond the communicator's depth, an unknown communicator.
  a_->inject_cq_data(0, encode_cq_data({recv_.index, 9, recv_.gen, len}, 8), nullptr, len, false);
  a_->inject_cq_data(0, encode_cq_data({999, 0, 0, len}, 8), nullptr, len, false);
  EXPECT_EQ(misses(), before + 3);
  auto t = a_->two_sided().test(recv_, *r);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_FALSE(t->done) << "forged or stale write data completed a receive";
  // The real thing completes it.
  a_->inject_cq_data(0, encode_cq_data({recv_.index, 0, recv_.gen, len}, 8), nullptr, len, false);
  t = a_->two_sided().test(recv_, *r);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_TRUE(t->done);
  EXPECT_EQ(t->bytes, len);
}

// A request-to-send goes on the control endpoint, the data on the data endpoints: when the
// receive was posted first (its clear-to-send crossed the request), the data can land and
// complete the receive before the request arrives. That request is stale, not misrouted.
TEST_F(EngineTest, ARequestToSendOvertakenByItsDataIsNotAMiss) {
  connect_self();
  std::vector<uint8_t> buf(64 << 10);
  auto lb = local(buf);
  auto r =
      a_->two_sided().irecv(recv_, buf.data(), buf.size(), lb);  // rendezvous-sized: CTS goes out
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const uint32_t len = 20000;
  a_->inject_cq_data(0, encode_cq_data({recv_.index, 0, recv_.gen, len}, 8), nullptr, len, false);
  auto t = a_->two_sided().test(recv_, *r);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE(t->done);
  const uint64_t before = misses();
  MsgHeader rts = header(MsgType::rts, recv_, send_, *r);
  rts.length = len;
  inject(rts);
  EXPECT_EQ(misses(), before) << "a request-to-send its data overtook was counted as misrouted";
  // With the next receive posted, the old request still changes nothing.
  auto r2 = a_->two_sided().irecv(recv_, buf.data(), buf.size(), lb);
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  inject(rts);
  EXPECT_EQ(misses(), before);
  t = a_->two_sided().test(recv_, *r2);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_FALSE(t->done) << "a stale request-to-send completed a later receive";
}

TEST_F(EngineTest, HeadersFromTheWrongPeerOrGenerationChangeNothing) {
  connect_self();
  std::vector<uint8_t> buf(256);
  auto lb = local(buf);
  auto r = a_->two_sided().irecv(recv_, buf.data(), 64, lb);
  ASSERT_TRUE(r.ok());
  const uint64_t before = misses();
  MsgHeader e = header(MsgType::eager, recv_, send_, *r);
  e.length = 4;
  std::vector<uint8_t> payload{1, 2, 3, 4};
  MsgHeader wrong_gen = e;
  wrong_gen.dst_gen = static_cast<uint8_t>((recv_.gen + 1) & pool::kCommGenMask);
  inject(wrong_gen, payload);
  MsgHeader wrong_src = e;
  wrong_src.src_comm = static_cast<uint16_t>(send_.index + 7);
  inject(wrong_src, payload);
  MsgHeader abort = header(MsgType::abort, recv_, CommId{static_cast<uint16_t>(send_.index + 1), 0}, *r);
  inject(abort);  // an abort from someone else's communicator
  MsgHeader credit = header(MsgType::credit, CommId{4000, 0}, recv_, 0);
  inject(credit);  // no such communicator
  EXPECT_EQ(misses(), before + 4);
  auto t = a_->two_sided().test(recv_, *r);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_FALSE(t->done);
  inject(e, payload);  // from the right peer: delivered
  t = a_->two_sided().test(recv_, *r);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->done);
  EXPECT_EQ(t->bytes, 4u);
  EXPECT_EQ(buf[3], 4);
}

TEST_F(EngineTest, LateTrafficOfAClosedCommunicatorIsCountedNotDelivered) {
  connect_self();
  const CommId old = recv_;
  a_->connections().close_comm(recv_);
  a_->connections().close_comm(send_);
  for (int i = 0; i < 200 && a_->stats().comms_open != 0; ++i) (void)a_->progress();
  ASSERT_EQ(a_->stats().comms_open, 0u);
  const uint64_t late = a_->stats().late_arrivals;
  a_->inject_cq_data(0, encode_cq_data({old.index, 0, old.gen, 12}, 8), nullptr, 12, false);
  std::vector<uint8_t> p(4, 9);
  a_->inject_cq_data(0, encode_cq_data({old.index, 0, old.gen, 0}, 8), p.data(), p.size(), true);
  EXPECT_EQ(a_->stats().late_arrivals, late + 2);
  // A new pair takes other ids first (FIFO): the old id is not reissued while others are free.
  connect_self();
  EXPECT_NE(recv_.index, old.index);
  EXPECT_NE(send_.index, old.index);
}

class TwoEngines : public EngineTest {
  const char* provider() const override { return "tcp;ofi_rxm"; }
};

TEST_F(TwoEngines, AForgedAcknowledgementDoesNotCompleteAConnect) {
  b_ = open_engine();  // the listener, which never progresses: nobody answers for real
  ASSERT_NE(b_, nullptr);
  auto l = b_->connections().listen();
  ASSERT_TRUE(l.ok());
  Result<CommId> got = Status(Code::internal, "not run");
  std::thread t([&] { got = a_->connections().connect(l->handle, Deadline::after(1500ms)); });
  for (int i = 0; i < 1000 && a_->stats().comms_open == 0; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(a_->stats().comms_open, 1u) << "the connecting communicator";
  // An acknowledgement naming that communicator (the first id a fresh engine issues) with the
  // listener's device, but not the request's nonce.
  AckBody body{};
  body.nonce = 0x1234;
  body.device_token = b_->device_token();
  body.eager_max = 4096;
  body.depth = 8;
  ConnAck ack;
  ack.body = body;
  std::vector<uint8_t> bytes = encode_conn_ack(ack);
  MsgHeader h = header(MsgType::conn_ack, CommId{1, 0}, CommId{1, 0}, 0);
  inject(h, bytes);
  t.join();
  ASSERT_FALSE(got.ok()) << "a forged acknowledgement completed the connect";
  EXPECT_EQ(got.status().code(), Code::timeout) << got.status().to_string();
}

}  // namespace
}  // namespace xport::proto

namespace xport::proto {
namespace {

// Connected endpoints with one channel per group: communicators share one connection.
class SharedConnection : public EngineTest {
  const char* provider() const override { return "tcp"; }
  uint32_t pool_channels() const override { return 1; }
};

TEST_F(SharedConnection, ForgedOrStaleDataOnASharedConnectionReachesNobody) {
  connect_self();
  const CommId first = recv_;
  connect_self();
  const CommId second = recv_;
  const PoolStats pool = a_->stats().pool;
  // This engine is both ends: one connection, an end in each direction, and the second pair
  // joined it (a secondary at each end).
  EXPECT_EQ(pool.channels, 2u);
  EXPECT_EQ(pool.primaries, 2u);
  EXPECT_EQ(pool.secondaries, 2u);
  std::vector<uint8_t> a(64 << 10), b(64 << 10);
  auto la = local(a);
  auto lb = local(b);
  auto ra = a_->two_sided().irecv(first, a.data(), a.size(), la);
  auto rb = a_->two_sided().irecv(second, b.data(), b.size(), lb);
  ASSERT_TRUE(ra.ok() && rb.ok());
  const uint64_t before = misses();
  const uint32_t len = 1000;
  // The second communicator's index with an older generation, a slot beyond its depth, a
  // communicator nobody has: on the connection both share, none reaches either receive.
  a_->inject_cq_data(0, encode_cq_data({second.index, 0, static_cast<uint8_t>(second.gen + 15), len}, 8),
                     nullptr, len, false);
  a_->inject_cq_data(0, encode_cq_data({second.index, 9, second.gen, len}, 8), nullptr, len, false);
  a_->inject_cq_data(0, encode_cq_data({999, 0, 0, len}, 8), nullptr, len, false);
  // A connection request that did not come over a connection it could share.
  ConnRequest req;
  req.body.device_token = 1234;
  inject(header(MsgType::conn_req, CommId{}, CommId{7, 0}, 0), encode_conn_request(req));
  EXPECT_EQ(misses(), before + 4);
  for (auto [comm, r] : {std::pair{first, *ra}, std::pair{second, *rb}}) {
    auto t = a_->two_sided().test(comm, r);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_FALSE(t->done) << "forged or stale data completed a receive";
  }
  // The real thing completes exactly its own receive.
  a_->inject_cq_data(0, encode_cq_data({second.index, 0, second.gen, len}, 8), nullptr, len, false);
  auto t = a_->two_sided().test(second, *rb);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->done);
  t = a_->two_sided().test(first, *ra);
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->done) << "data for the second communicator completed the first's receive";
  EXPECT_EQ(a_->stats().pool.channels, 2u);
}

}  // namespace
}  // namespace xport::proto
