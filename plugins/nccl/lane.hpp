// One lane of an NCCL device: a libxport Device of its own and, with more than one lane, the
// thread that alone drives it. NCCL's proxy threads hand their posts to the lane's inbox and
// read the outcomes the lane's thread publishes; they never take the lane's device.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "xport/xport.hpp"

namespace xport::nccl {

struct Request;
struct CommBase;

// Every NCCL comm lives wholly on one lane, the lanes taken in turn by listen and connect. With
// more than one lane (XPORT_NCCL_LANES; 0: auto) each has a thread that posts what NCCL asked
// for, drives the device's progress (on tcp;ofi_rxm the kernel's socket copies, which one proxy
// thread otherwise makes one after another) and publishes each request's outcome, so that the
// comms of NCCL's channels move their bytes in parallel (docs/nccl.md, "Lanes"). NCCL's calls
// only queue and read: a thread spinning on progress passes holds its device nearly all the
// time, and calls that took the device only when it was free were refused over and over
// (issue 42).
struct Lane {
  int index = 0;
  std::unique_ptr<Device> device;

  ~Lane();
  // Starts the lane's thread; it polls for `spin` after its last request before it sleeps.
  void start_thread(std::chrono::microseconds spin);
  bool driven() const { return thread_.joinable(); }
  // NCCL's thread: a request (its post described in it) for the lane's thread to post, in the
  // order of the calls; test() then reads Request::published.
  void submit(Request* r);
  // A comm of the lane is closing: its requests leave the lane's lists, never to be published.
  void forget(const CommBase* c);

 private:
  void run();
  void take_inbox();   // with lists_mu_
  void post_pending();  // with lists_mu_
  bool post(Request* r);
  void test_posted();  // with lists_mu_
  void publish(Request* r);

  std::atomic<Request*> inbox_{nullptr};  // newest first (pushed by NCCL's threads)
  std::mutex lists_mu_;  // the lists below: the lane's thread, and forget()
  Request* pending_ = nullptr;  // taken from the inbox, not yet posted (oldest first)
  Request** pending_tail_ = &pending_;
  Request* posted_ = nullptr;  // posted, outcome not yet published
  std::chrono::microseconds spin_{0};
  std::atomic<bool> sleeping_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::atomic<bool> stopping_{false};  // the same, read between passes
  std::thread thread_;
};

}  // namespace xport::nccl
