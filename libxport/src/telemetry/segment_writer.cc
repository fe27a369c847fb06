// The stats segment's writer side: file creation, mapping, seqlock publication.
#include "telemetry/segment_writer.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "core/format.hpp"
#include "telemetry/block.hpp"
#include "telemetry/names.hpp"
#include "telemetry/process.hpp"

namespace xport::telemetry {
namespace {

uint64_t realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::atomic_ref<uint64_t> generation_of(SegmentHeader* h) {
  return std::atomic_ref<uint64_t>(h->generation);
}

}  // namespace

std::string segment_file_name(uint64_t uid, uint64_t pid) {
  return core::str(kSegmentPrefix, uid, "-", pid);
}

Result<std::unique_ptr<SegmentWriter>> SegmentWriter::create(const std::string& dir,
                                                             const ProcessLabels& labels,
                                                             uint32_t interval_ms) {
  const pid_t pid = ::getpid();
  const uid_t uid = ::geteuid();
  const std::string name = segment_file_name(uid, pid);
  const std::string path = dir + "/" + name;
  const std::string tmp = dir + "/." + name + ".init";
  int fd = -1;
  for (int attempt = 0; attempt < 2 && fd < 0; ++attempt) {
    fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    // Left by a dead process that had our pid: nobody else may use this name.
    if (fd < 0 && errno == EEXIST) ::unlink(tmp.c_str());
  }
  if (fd < 0) {
    return core::error(Code::resource, "telemetry: cannot create ", tmp, ": ",
                       std::strerror(errno));
  }
  auto fail = [&](const char* what) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return core::error(Code::resource, "telemetry: ", what, " ", tmp, ": ", std::strerror(e));
  };
  // fchmod too: the mode given to open() is masked by the umask, owner-only must survive it.
  if (::fchmod(fd, 0600) != 0) return fail("fchmod");
  if (::ftruncate(fd, static_cast<off_t>(kSegmentSize)) != 0) return fail("ftruncate");
  void* map = ::mmap(nullptr, kSegmentSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return fail("mmap");
  ::close(fd);

  auto w = std::unique_ptr<SegmentWriter>(new SegmentWriter());
  w->map_ = map;
  w->path_ = path;
  w->owner_pid_ = pid;
  SegmentHeader* h = w->header();
  std::memset(h, 0, sizeof(*h));
  std::memcpy(h->magic, kSegmentMagic, sizeof(h->magic));
  h->version = kSegmentVersion;
  h->header_size = sizeof(SegmentHeader);
  h->total_size = kSegmentSize;
  h->block_size = sizeof(BlockRecord);
  h->max_blocks = kMaxBlocks;
  h->pid = static_cast<uint64_t>(pid);
  h->uid = uid;
  h->start_ticks = process_start_ticks(pid);
  h->interval_ms = interval_ms;
  int n = 0;
  auto add = [&](LabelKey key, const std::string& value) {
    if (!value.empty() && n < kProcessLabels) set_label(h->process_labels[n++], key, value);
  };
  add(LabelKey::job, labels.job);
  add(LabelKey::rank, labels.rank);
  add(LabelKey::program, labels.program);
  w->publish({});
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return core::error(Code::resource, "telemetry: rename ", tmp, " to ", path, ": ",
                       std::strerror(e));
  }
  w->linked_ = true;
  return w;
}

SegmentWriter::~SegmentWriter() {
  unlink_file();
  if (map_ != nullptr) ::munmap(map_, kSegmentSize);
}

void SegmentWriter::unlink_file() {
  // A forked child inherits the object but not the segment: only its creator removes it.
  if (linked_ && ::getpid() == owner_pid_) ::unlink(path_.c_str());
  linked_ = false;
}

size_t SegmentWriter::publish(std::span<const BlockRecord> blocks) {
  SegmentHeader* h = header();
  const size_t count = blocks.size() < kMaxBlocks ? blocks.size() : kMaxBlocks;
  auto gen = generation_of(h);
  const uint64_t g = gen.load(std::memory_order_relaxed);
  // Seqlock: odd while writing. The release fence keeps the data stores below after the odd
  // store; the release store of the even value publishes them.
  gen.store(g + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  auto* table =
      reinterpret_cast<BlockRecord*>(reinterpret_cast<uint8_t*>(map_) + sizeof(SegmentHeader));
  if (count > 0) std::memcpy(table, blocks.data(), count * sizeof(BlockRecord));
  h->block_count = static_cast<uint32_t>(count);
  h->publish_time_ns = realtime_ns();
  h->snapshots += 1;
  gen.store(g + 2, std::memory_order_release);
  return blocks.size() - count;
}

}  // namespace xport::telemetry
