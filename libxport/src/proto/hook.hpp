// A hook: one member function of one part, bound by whoever composes the parts (the engine), so
// that a part can call another through one narrow signature without knowing its class. Two
// words, no allocation; calling an unbound hook does nothing (and returns R{}).
#pragma once

#include <utility>

namespace xport::proto {

template <typename Sig>
class Hook;

template <typename R, typename... Args>
class Hook<R(Args...)> {
 public:
  // Binds `Method` (a member function of Part taking Args...) of `part`.
  template <auto Method, typename Part>
  void bind(Part* part) {
    part_ = part;
    fn_ = [](void* p, Args... a) -> R {
      return (static_cast<Part*>(p)->*Method)(std::forward<Args>(a)...);
    };
  }
  R operator()(Args... a) const {
    if (fn_ == nullptr) return R();
    return fn_(part_, std::forward<Args>(a)...);
  }
  explicit operator bool() const { return fn_ != nullptr; }

 private:
  void* part_ = nullptr;
  R (*fn_)(void*, Args...) = nullptr;
};

}  // namespace xport::proto
