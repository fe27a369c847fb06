// Validation and decoding of stats segments (fuzzed by tests/fuzz/segment_fuzz.cc).
#include "telemetry/segment_reader.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

#include "core/format.hpp"
#include "telemetry/block.hpp"
#include "telemetry/segment_format.hpp"

namespace xport::telemetry {
namespace {

DecodeResult reject(Reject r, std::string detail) {
  DecodeResult out;
  out.reason = r;
  out.detail = std::move(detail);
  return out;
}

template <typename T>
T load(std::span<const uint8_t> bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

// Checks one label slot; false when it is not something our writer could have produced.
bool decode_label(const LabelSlot& s, Label* out) {
  if (!label_key_valid(s.key) || s.length == 0 || s.length > kLabelValueMax) return false;
  for (size_t i = 0; i < s.length; ++i) {
    if (!label_char_allowed(s.value[i])) return false;
  }
  out->key = static_cast<LabelKey>(s.key);
  out->value.assign(s.value, s.length);
  return true;
}

bool decode_labels(const LabelSlot* slots, size_t n, std::vector<Label>* out) {
  uint32_t seen = 0;
  for (size_t i = 0; i < n; ++i) {
    Label l;
    if (!decode_label(slots[i], &l)) return false;
    uint32_t bit = 1u << static_cast<uint8_t>(l.key);
    if (seen & bit) return false;  // one value per key
    seen |= bit;
    out->push_back(std::move(l));
  }
  return true;
}

}  // namespace

const char* reject_name(Reject r) {
  switch (r) {
    case Reject::none:
      return "none";
    case Reject::owner:
      return "owner";
    case Reject::size:
      return "size";
    case Reject::version:
      return "version";
    case Reject::corrupt:
      return "corrupt";
    case Reject::torn:
      return "torn";
    case Reject::dead:
      return "dead";
    case Reject::io:
      return "io";
  }
  return "?";
}

const std::string* SegmentSnapshot::process_label(LabelKey key) const {
  for (const auto& l : process_labels) {
    if (l.key == key) return &l.value;
  }
  return nullptr;
}

DecodeResult decode_segment(std::span<const uint8_t> bytes) {
  static_assert(sizeof(LabelKey) == 1 && static_cast<int>(LabelKey::count) <= 32);
  if (bytes.size() < sizeof(SegmentHeader)) {
    return reject(Reject::size, core::str(bytes.size(), " bytes: shorter than the header"));
  }
  SegmentHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (std::memcmp(h.magic, kSegmentMagic, sizeof(h.magic)) != 0) {
    return reject(Reject::corrupt, "bad magic");
  }
  if (h.version != kSegmentVersion) {
    return reject(Reject::version,
                  core::str("version ", h.version, ", expected ", kSegmentVersion));
  }
  if (h.header_size != sizeof(SegmentHeader) || h.block_size != sizeof(BlockRecord) ||
      h.max_blocks != kMaxBlocks || h.total_size != kSegmentSize || bytes.size() != kSegmentSize) {
    return reject(Reject::size,
                  core::str("layout header ", h.header_size, " block ", h.block_size, " x ",
                            h.max_blocks, " total ", h.total_size, " file ", bytes.size()));
  }
  if (h.generation % 2 != 0) return reject(Reject::torn, "update in progress");
  if (h.block_count > kMaxBlocks) {
    return reject(Reject::corrupt, core::str(h.block_count, " blocks"));
  }
  DecodeResult out;
  SegmentSnapshot& s = out.snapshot;
  s.generation = h.generation;
  s.pid = h.pid;
  s.uid = h.uid;
  s.start_ticks = h.start_ticks;
  s.publish_time_ns = h.publish_time_ns;
  s.snapshots = h.snapshots;
  s.interval_ms = h.interval_ms;
  size_t plabels = 0;
  while (plabels < kProcessLabels && h.process_labels[plabels].key != 0) ++plabels;
  if (!decode_labels(h.process_labels, plabels, &s.process_labels)) {
    return reject(Reject::corrupt, "process labels");
  }
  s.blocks.reserve(h.block_count);
  for (uint32_t b = 0; b < h.block_count; ++b) {
    const auto rec = load<BlockRecord>(bytes, sizeof(SegmentHeader) + b * sizeof(BlockRecord));
    if (rec.kind == 0 || rec.label_count > kBlockLabels || rec.counter_count > kBlockCounters) {
      return reject(Reject::corrupt, core::str("block ", b, " header"));
    }
    BlockSnapshot bs;
    bs.kind = rec.kind;
    if (!decode_labels(rec.labels, rec.label_count, &bs.labels)) {
      return reject(Reject::corrupt, core::str("block ", b, " labels"));
    }
    bs.counters.reserve(rec.counter_count);
    for (int c = 0; c < rec.counter_count; ++c) {
      if (rec.counters[c].id == 0)
        return reject(Reject::corrupt, core::str("block ", b, " counter"));
      bs.counters.emplace_back(rec.counters[c].id, rec.counters[c].value);
    }
    s.blocks.push_back(std::move(bs));
  }
  return out;
}

bool parse_segment_name(const std::string& name, FileIdentity* out) {
  const std::string prefix = kSegmentPrefix;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  size_t dash = name.find('-', prefix.size());
  if (dash == std::string::npos) return false;
  auto number = [](const std::string& t, uint64_t* v) {
    if (t.empty() || t.size() > 10) return false;
    uint64_t n = 0;
    for (char c : t) {
      if (c < '0' || c > '9') return false;
      n = n * 10 + static_cast<uint64_t>(c - '0');
    }
    *v = n;
    return true;
  };
  return number(name.substr(prefix.size(), dash - prefix.size()), &out->uid) &&
         number(name.substr(dash + 1), &out->pid) && out->pid > 0;
}

DecodeResult read_segment_file(const std::string& path, const FileIdentity& id) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    // ELOOP: a symbolic link where a segment should be; EACCES: not ours to read.
    if (e == ELOOP || e == EACCES || e == EPERM) return reject(Reject::owner, std::strerror(e));
    return reject(Reject::io, std::strerror(e));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return reject(Reject::io, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return reject(Reject::owner, "not a regular file");
  if (st.st_uid != id.uid) {
    return reject(Reject::owner, core::str("owned by uid ", st.st_uid, ", named for uid ", id.uid));
  }
  if ((st.st_mode & 077) != 0) return reject(Reject::owner, "readable by others than its owner");
  if (static_cast<uint64_t>(st.st_size) != kSegmentSize) {
    return reject(Reject::size, core::str(st.st_size, " bytes, expected ", kSegmentSize));
  }
  std::vector<uint8_t> buf(kSegmentSize);
  auto read_generation = [&](uint64_t* g) {
    return ::pread(fd, g, sizeof(*g), offsetof(SegmentHeader, generation)) ==
           static_cast<ssize_t>(sizeof(*g));
  };
  DecodeResult last = reject(Reject::torn, "no consistent snapshot");
  // The writer holds the generation odd for microseconds: a few immediate retries suffice.
  for (int attempt = 0; attempt < 8; ++attempt) {
    uint64_t g1 = 0, g2 = 0;
    if (!read_generation(&g1)) return reject(Reject::io, "short read");
    if (g1 % 2 != 0) {
      last = reject(Reject::torn, "update in progress");
      // Kept so the caller can still tell a dead owner whose pid was reused.
      uint64_t ticks = 0;
      if (::pread(fd, &ticks, sizeof(ticks), offsetof(SegmentHeader, start_ticks)) ==
          static_cast<ssize_t>(sizeof(ticks))) {
        last.snapshot.start_ticks = ticks;
      }
      continue;
    }
    ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
    if (n != static_cast<ssize_t>(buf.size())) {
      return n < 0 ? reject(Reject::io, std::strerror(errno))
                   : reject(Reject::size, core::str("read ", n, " bytes"));
    }
    if (!read_generation(&g2)) return reject(Reject::io, "short read");
    if (g1 != g2 || load<uint64_t>(buf, offsetof(SegmentHeader, generation)) != g1) {
      last = reject(Reject::torn, "changed while read");
      last.snapshot.start_ticks = load<uint64_t>(buf, offsetof(SegmentHeader, start_ticks));
      continue;
    }
    DecodeResult r = decode_segment(buf);
    if (r.ok() && (r.snapshot.pid != id.pid || r.snapshot.uid != id.uid)) {
      return reject(Reject::corrupt,
                    core::str("header names pid ", r.snapshot.pid, " uid ", r.snapshot.uid,
                              ", file name pid ", id.pid, " uid ", id.uid));
    }
    return r;
  }
  return last;
}

}  // namespace xport::telemetry
