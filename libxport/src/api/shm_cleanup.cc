// Removing the shared-memory files of libxport processes that died (shm_cleanup.hpp).
#include "api/shm_cleanup.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "fabric/objects.hpp"
#include "telemetry/process.hpp"
#include "telemetry/segment_reader.hpp"

namespace xport::api {
namespace {

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) out.emplace_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

// A regular file of ours (not a link, not another user's): the only kind this code removes.
bool ours(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid();
}

}  // namespace

ShmCleanup remove_dead_shm_files(const std::string& region_dir, const std::string& segment_dir) {
  ShmCleanup out;
  for (const auto& name : names_in(region_dir)) {
    pid_t pid = 0;
    if (!fabric::parse_shm_region_name(name, &pid) || pid == ::getpid()) continue;
    const std::string path = region_dir + "/" + name;
    if (telemetry::process_liveness(pid, 0) == telemetry::Liveness::dead && ours(path) &&
        ::unlink(path.c_str()) == 0) {
      ++out.regions;
    }
  }
  for (const auto& name : names_in(segment_dir)) {
    telemetry::FileIdentity id;
    if (!telemetry::parse_segment_name(name, &id) || id.uid != ::geteuid() ||
        id.pid == static_cast<uint64_t>(::getpid())) {
      continue;
    }
    const std::string path = segment_dir + "/" + name;
    if (!ours(path)) continue;
    // The segment says when its process started: a pid reused since is told apart.
    const uint64_t start = telemetry::read_segment_file(path, id).snapshot.start_ticks;
    if (telemetry::process_liveness(static_cast<pid_t>(id.pid), start) ==
            telemetry::Liveness::dead &&
        ::unlink(path.c_str()) == 0) {
      ++out.segments;
    }
  }
  return out;
}

}  // namespace xport::api
