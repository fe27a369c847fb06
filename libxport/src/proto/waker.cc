#include "proto/waker.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/format.hpp"

namespace xport::proto {

Waker::~Waker() {
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (event_fd_ >= 0) close(event_fd_);
}

Status Waker::open() {
  if (epoll_fd_ >= 0) return Status::success();
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) {
    return Status(Code::internal, core::str("blocking wait: epoll_create1: ", std::strerror(errno)));
  }
  const int ev = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE);
  if (ev < 0) {
    const int err = errno;
    close(ep);
    return Status(Code::internal, core::str("blocking wait: eventfd: ", std::strerror(err)));
  }
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = ev;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, ev, &e) != 0) {
    const int err = errno;
    close(ep);
    close(ev);
    return Status(Code::internal, core::str("blocking wait: epoll_ctl: ", std::strerror(err)));
  }
  epoll_fd_ = ep;
  event_fd_ = ev;
  return Status::success();
}

Status Waker::watch(int fd) {
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = fd;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e) != 0 && errno != EEXIST) {
    return Status(Code::internal,
                  core::str("blocking wait: epoll_ctl on fd ", fd, ": ", std::strerror(errno)));
  }
  return Status::success();
}

void Waker::sleep(std::chrono::microseconds limit) {
  // epoll_wait counts in milliseconds: a limit under one is rounded up (a short sleep is the
  // point; the caller's deadline is checked when it returns).
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(limit).count();
  epoll_event events[8];
  const int n = epoll_wait(epoll_fd_, events, 8, static_cast<int>(ms > 0 ? ms : 0));
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd == event_fd_) {
      // One count per sleeper rung for (a semaphore): each woken sleeper takes its own, and
      // the bell stays readable for the others. EAGAIN when they took them all: fine.
      uint64_t v = 0;
      (void)!read(event_fd_, &v, sizeof(v));
    }
  }
}

void Waker::ring() {
  if (event_fd_ < 0) return;
  const uint64_t n = sleepers_.load(std::memory_order_relaxed);
  if (n != 0) (void)!write(event_fd_, &n, sizeof(n));
}

}  // namespace xport::proto
