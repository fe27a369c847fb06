// The comm-id table: 16-bit ids that, with a 4-bit generation, route completions on shared
// channels to communicators. Id 0 is never issued (it marks "no communicator" on the wire).
// Freed ids go to the back of a FIFO and come back with the next generation, so an id is
// reissued only after every other free id was used, and never with the generation its previous
// owner had: late traffic for the old owner finds no communicator (or the wrong generation)
// instead of the new one. The engine frees an id only once no traffic for it can be expected
// (docs/semantics.md, "Closing").
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

namespace xport::pool {

inline constexpr unsigned kCommGenBits = 4;
inline constexpr uint8_t kCommGenMask = (1u << kCommGenBits) - 1;

struct CommId {
  uint16_t index = 0;  // 0: none
  uint8_t gen = 0;     // kCommGenBits wide
  bool operator==(const CommId&) const = default;
  explicit operator bool() const { return index != 0; }
};

template <typename T>
class CommTable {
 public:
  explicit CommTable(size_t capacity) : slots_(capacity + 1) {
    for (size_t i = 1; i <= capacity; ++i) free_.push_back(static_cast<uint16_t>(i));
  }
  // Returns {0, 0} when the table is full.
  CommId insert(std::unique_ptr<T> value) {
    if (free_.empty()) return {};
    const uint16_t index = free_.front();
    free_.pop_front();
    Slot& s = slots_[index];
    s.value = std::move(value);
    return {index, s.gen};
  }
  // The live communicator with this index and generation, else nullptr.
  T* find(CommId id) const {
    if (id.index == 0 || id.index >= slots_.size()) return nullptr;
    const Slot& s = slots_[id.index];
    return s.gen == (id.gen & kCommGenMask) ? s.value.get() : nullptr;
  }
  // The live communicator with this index, whatever its generation (for callers whose wire
  // format has no room for one: they check what else they can).
  T* find_any(uint16_t index) const {
    return index != 0 && index < slots_.size() ? slots_[index].value.get() : nullptr;
  }
  void erase(uint16_t index) {
    if (index == 0 || index >= slots_.size() || !slots_[index].value) return;
    Slot& s = slots_[index];
    s.value.reset();
    s.gen = static_cast<uint8_t>((s.gen + 1) & kCommGenMask);
    free_.push_back(index);
  }
  size_t capacity() const { return slots_.size() - 1; }
  size_t size() const { return capacity() - free_.size(); }
  template <typename F>
  void for_each(F&& f) {
    for (size_t i = 1; i < slots_.size(); ++i)
      if (slots_[i].value) f(static_cast<uint16_t>(i), *slots_[i].value);
  }

 private:
  struct Slot {
    std::unique_ptr<T> value;
    uint8_t gen = 0;
  };
  std::vector<Slot> slots_;
  std::deque<uint16_t> free_;
};

}  // namespace xport::pool
