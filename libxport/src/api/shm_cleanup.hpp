// Files in shared memory that libxport processes which died (SIGKILL, a crash) leave behind: the
// shm provider's endpoint regions (/dev/shm/xport_<pid>_<nonce>_<n>) and stats segments
// (xport-<uid>-<pid> in XPORT_TELEMETRY_DIR). Context::open removes this user's files of
// processes that are gone (XPORT_SHM_CLEANUP), and so does every scan of xport-exporter.
#pragma once

#include <cstddef>
#include <string>

namespace xport::api {

struct ShmCleanup {
  size_t regions = 0;   // shm provider regions removed
  size_t segments = 0;  // stats segments removed
};

// Removes, from `region_dir` and `segment_dir`, the regular files of this effective user named
// as above whose process no longer exists (or is a zombie; a segment's process also when its pid
// now belongs to a process started at another time). Never follows links; a file it may not
// remove is left.
ShmCleanup remove_dead_shm_files(const std::string& region_dir, const std::string& segment_dir);

}  // namespace xport::api
