// The sending side of the stream tests (gtest assertions): `count` messages of
// message_sizes(seed, count, max), patterned for the receiver to verify, `depth` in flight.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <vector>

#include "harness.hpp"
#include "xport/xport.hpp"

namespace xport::test {

inline void send_stream(Device& dev, SendComm& comm, uint32_t seed, size_t count, size_t max,
                        size_t depth, std::chrono::seconds per_message,
                        std::atomic<size_t>* progress = nullptr) {
  const auto sizes = message_sizes(seed, count, max);
  std::vector<std::vector<uint8_t>> bufs(depth, std::vector<uint8_t>(max + 1));
  std::vector<Region> regs;
  for (auto& b : bufs) regs.push_back(*dev.register_memory(b.data(), b.size()));
  std::vector<Request> reqs(depth);
  size_t posted = 0, done = 0;
  while (done < count) {
    while (posted < count && posted - done < depth) {
      fill(bufs[posted % depth].data(), sizes[posted], posted);
      auto r = comm.isend(bufs[posted % depth].data(), sizes[posted], regs[posted % depth]);
      ASSERT_TRUE(r.ok()) << "isend " << posted << ": " << r.status().to_string();
      reqs[posted % depth] = *r;
      ++posted;
    }
    auto got = comm.wait(reqs[done % depth], Deadline::after(per_message));
    ASSERT_TRUE(got.ok()) << "send " << done << ": " << got.status().to_string();
    ASSERT_EQ(*got, sizes[done]);
    ++done;
    if (progress != nullptr) progress->store(done);
  }
}

}  // namespace xport::test
