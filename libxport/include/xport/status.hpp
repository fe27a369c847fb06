// Errors as values: every fallible call in libxport returns a Status or a Result<T>.
// Messages name what failed and where (provider strings included); nothing throws across the API.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace xport {

enum class Code : uint8_t {
  ok = 0,
  invalid_argument,  // the caller passed something wrong: the message names it
  not_found,         // a named thing (provider, domain, knob, key) does not exist
  unsupported,       // the provider or build lacks a capability
  timeout,           // a deadline passed
  again,             // the provider is busy even after driving progress; retry later
  fabric,            // libfabric reported an error (provider message included)
  peer_lost,         // the remote side closed, died, or refused
  truncated,         // a message is larger than the buffer posted for it
  closed,            // the object was closed, or its rail failed
  protocol,          // a malformed or unexpected wire message or handle
  resource,          // out of memory, slots, or locked memory
  internal,          // a bug in libxport: please report
};

std::string_view to_string(Code code);

// An ok Status is two words and no allocation (a null message): it is built, moved and
// dropped at every layer of every call, the hot ones included. A failure's message lives on
// the heap.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message)
      : code_(code),
        message_(message.empty() ? nullptr : std::make_unique<std::string>(std::move(message))) {}
  Status(const Status& other)
      : code_(other.code_),
        message_(other.message_ ? std::make_unique<std::string>(*other.message_) : nullptr) {}
  Status(Status&& other) noexcept = default;
  // (Member-wise, as in Result below: nvcc's front end warns of an assignment to a [[nodiscard]]
  // type whose result is dropped, and CUDA code includes these headers.)
  Status& operator=(const Status& other) {
    if (this != &other) {
      code_ = other.code_;
      message_ = other.message_ ? std::make_unique<std::string>(*other.message_) : nullptr;
    }
    return *this;
  }
  Status& operator=(Status&& other) noexcept = default;
  ~Status() = default;

  static Status success() { return Status(); }

  bool ok() const { return code_ == Code::ok; }
  // `if (status)` reads as "if it succeeded", as with std::expected.
  explicit operator bool() const { return ok(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_ ? *message_ : kNoMessage; }

  // "timeout: waiting for clear-to-send of message 7 on comm 3"
  std::string to_string() const;

  // Prefixes the message with where it happened: "connect: " + message.
  Status with_context(std::string_view where) const&;
  Status with_context(std::string_view where) &&;

 private:
  static inline const std::string kNoMessage{};

  Code code_ = Code::ok;
  std::unique_ptr<std::string> message_;  // null: no message
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(const T& value) : has_value_(true) { new (&storage_) T(value); }
  Result(T&& value) : has_value_(true) { new (&storage_) T(std::move(value)); }
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status>>>
  Result(U&& value) : has_value_(true) {
    new (&storage_) T(std::forward<U>(value));
  }
  Result(Status status)
      : status_(status.ok() ? Status(Code::internal, "Result built from an ok Status")
                            : std::move(status)) {}
  Result(const Result& other) : status_(other.status_), has_value_(other.has_value_) {
    if (has_value_) new (&storage_) T(other.value_ref());
  }
  Result(Result&& other) noexcept : status_(std::move(other.status_)), has_value_(other.has_value_) {
    if (has_value_) new (&storage_) T(std::move(other.value_ref()));
  }
  Result& operator=(Result other) noexcept {
    destroy();
    std::swap(status_, other.status_);
    has_value_ = other.has_value_;
    if (has_value_) new (&storage_) T(std::move(other.value_ref()));
    return *this;
  }
  ~Result() { destroy(); }

  bool ok() const { return has_value_; }
  explicit operator bool() const { return has_value_; }
  const Status& status() const { return status_; }

  T& value() & { return value_ref(); }
  const T& value() const& { return value_ref(); }
  T&& value() && { return std::move(value_ref()); }
  T* operator->() { return &value_ref(); }
  const T* operator->() const { return &value_ref(); }
  T& operator*() & { return value_ref(); }
  const T& operator*() const& { return value_ref(); }

 private:
  T& value_ref() { return *std::launder(reinterpret_cast<T*>(&storage_)); }
  const T& value_ref() const { return *std::launder(reinterpret_cast<const T*>(&storage_)); }
  void destroy() {
    if (has_value_) value_ref().~T();
    has_value_ = false;
  }

  Status status_;
  bool has_value_ = false;
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace xport

#define XPORT_CONCAT_INNER(a, b) a##b
#define XPORT_CONCAT(a, b) XPORT_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function when it is not ok.
#define XPORT_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::xport::Status xport_status_ = (expr);  \
    if (!xport_status_.ok()) return xport_status_; \
  } while (0)

// `XPORT_ASSIGN_OR_RETURN(auto x, make());` declares x from a Result or returns its Status.
#define XPORT_ASSIGN_OR_RETURN(lhs, expr) \
  XPORT_ASSIGN_OR_RETURN_IMPL(XPORT_CONCAT(xport_result_, __LINE__), lhs, expr)
#define XPORT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
