// Reading /proc for the segment's owner identity.
#include "telemetry/process.hpp"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace xport::telemetry {

namespace {
struct StatFields {
  char state = '?';
  uint64_t start_ticks = 0;
};

StatFields read_stat(pid_t pid) {
  StatFields out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
  size_t close = text.rfind(')');
  if (close == std::string::npos) return out;
  std::istringstream fields(text.substr(close + 1));
  std::string f;
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> f)) return out;
    if (i == 3 && !f.empty()) out.state = f[0];
  }
  char* end = nullptr;
  unsigned long long v = std::strtoull(f.c_str(), &end, 10);
  if (end != f.c_str() && *end == '\0') out.start_ticks = v;
  return out;
}
}  // namespace

uint64_t process_start_ticks(pid_t pid) { return read_stat(pid).start_ticks; }

Liveness process_liveness(pid_t pid, uint64_t start_ticks) {
  if (pid <= 0) return Liveness::dead;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return Liveness::dead;
  StatFields now = read_stat(pid);
  // A zombie has exited: its segment will never change again.
  if (now.state == 'Z' || now.state == 'X') return Liveness::dead;
  // A /proc we cannot read gives 0: not proof of death.
  if (now.start_ticks != 0 && start_ticks != 0 && now.start_ticks != start_ticks) {
    return Liveness::dead;
  }
  return Liveness::alive;
}

std::string program_name() {
  // The executable's own name: /proc/self/comm is whatever the process was started as, and a
  // process started from /proc/self/exe (xport-bench's local peer) is called "exe" there; comm
  // is also cut at 15 characters.
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n > 0) {
    std::string exe(path, static_cast<size_t>(n));
    const std::string deleted = " (deleted)";  // the binary was replaced while running
    if (exe.size() > deleted.size() &&
        exe.compare(exe.size() - deleted.size(), deleted.size(), deleted) == 0) {
      exe.resize(exe.size() - deleted.size());
    }
    const size_t slash = exe.rfind('/');
    std::string base = slash == std::string::npos ? exe : exe.substr(slash + 1);
    if (!base.empty()) return base;
  }
  std::ifstream in("/proc/self/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

}  // namespace xport::telemetry
