// The comm-id table: 16-bit ids that route completions on shared channels to communicators.
// Id 0 is never issued (it marks "no communicator" on the wire).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace xport::pool {

template <typename T>
class CommTable {
 public:
  explicit CommTable(size_t capacity) : slots_(capacity + 1) {
    for (size_t i = capacity; i >= 1; --i) free_.push_back(static_cast<uint16_t>(i));
  }
  // Returns 0 when the table is full.
  uint16_t insert(std::unique_ptr<T> value) {
    if (free_.empty()) return 0;
    uint16_t id = free_.back();
    free_.pop_back();
    slots_[id] = std::move(value);
    return id;
  }
  T* find(uint16_t id) const { return id < slots_.size() ? slots_[id].get() : nullptr; }
  void erase(uint16_t id) {
    if (id == 0 || id >= slots_.size() || !slots_[id]) return;
    slots_[id].reset();
    free_.push_back(id);
  }
  size_t capacity() const { return slots_.size() - 1; }
  size_t size() const { return capacity() - free_.size(); }
  template <typename F>
  void for_each(F&& f) {
    for (size_t i = 1; i < slots_.size(); ++i)
      if (slots_[i]) f(static_cast<uint16_t>(i), *slots_[i]);
  }

 private:
  std::vector<std::unique_ptr<T>> slots_;
  std::vector<uint16_t> free_;
};

}  // namespace xport::pool
