// One pass over the segment directory.
#include "node_scan.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>

#include "telemetry/process.hpp"

namespace xport::exporter {

using telemetry::Reject;

std::vector<std::string> NodeScan::reject_reasons() {
  std::vector<std::string> out;
  for (Reject r : telemetry::kRejectReasons) out.push_back(telemetry::reject_name(r));
  out.push_back("limit");  // more live processes than --max-processes
  return out;
}

std::map<std::string, uint64_t> NodeScan::initial() {
  std::map<std::string, uint64_t> m;
  for (const auto& r : reject_reasons()) m[r] = 0;
  return m;
}

void NodeScan::count(const std::string& reason, uint64_t dev, uint64_t ino, bool once) {
  if (once) {
    auto key = std::make_tuple(dev, ino, reason);
    counted_now_.insert(key);
    if (counted_.count(key)) return;
  }
  rejected_[reason] += 1;
}

ScanResult NodeScan::scan() {
  ScanResult out;
  counted_now_.clear();
  DIR* d = ::opendir(options_.dir.c_str());
  if (d == nullptr) return out;
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());

  for (const auto& name : names) {
    telemetry::FileIdentity id;
    if (!telemetry::parse_segment_name(name, &id)) continue;
    const std::string path = options_.dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;  // gone since readdir
    const uint64_t dev = st.st_dev, ino = st.st_ino;
    telemetry::DecodeResult r = telemetry::read_segment_file(path, id);

    if (r.reason == Reject::owner) {  // never touch a file that is not what it claims to be
      count("owner", dev, ino, true);
      continue;
    }
    auto live = telemetry::process_liveness(static_cast<pid_t>(id.pid), r.snapshot.start_ticks);
    if (live == telemetry::Liveness::dead) {
      // Our own decision, from the file's name and owner: its process is gone, for good.
      if (::unlink(path.c_str()) == 0) {
        removed_ += 1;
        count("dead", dev, ino, false);
      } else {
        count("dead", dev, ino, true);
      }
      continue;
    }
    if (!r.ok()) {
      count(telemetry::reject_name(r.reason), dev, ino, r.reason != Reject::torn);
      continue;
    }
    if (out.processes.size() >= options_.max_processes) {
      count("limit", dev, ino, true);
      continue;
    }
    ProcessView v;
    v.file = name;
    v.snapshot = std::move(r.snapshot);
    auto label = [&](telemetry::LabelKey k) {
      const std::string* s = v.snapshot.process_label(k);
      return s != nullptr ? *s : std::string();
    };
    v.job = label(telemetry::LabelKey::job);
    v.rank = label(telemetry::LabelKey::rank);
    v.program = label(telemetry::LabelKey::program);
    out.processes.push_back(std::move(v));
  }
  counted_.swap(counted_now_);
  std::sort(
      out.processes.begin(), out.processes.end(),
      [](const ProcessView& a, const ProcessView& b) { return a.snapshot.pid < b.snapshot.pid; });
  assign_slots(out);
  return out;
}

void NodeScan::assign_slots(ScanResult& out) {
  std::map<std::pair<uint64_t, uint64_t>, std::pair<std::string, unsigned>> now;
  std::map<std::string, std::set<unsigned>> taken;  // by job and rank
  auto group = [](const ProcessView& v) { return v.job + '\n' + v.rank; };
  std::vector<ProcessView*> fresh;
  for (auto& v : out.processes) {
    const auto key = std::make_pair(v.snapshot.pid, v.snapshot.start_ticks);
    auto it = slots_.find(key);
    if (it != slots_.end() && it->second.first == group(v)) {
      v.slot = it->second.second;
      taken[group(v)].insert(v.slot);
      now[key] = it->second;
    } else {
      fresh.push_back(&v);
    }
  }
  for (ProcessView* v : fresh) {  // in pid order: the older of two new processes first
    std::set<unsigned>& used = taken[group(*v)];
    unsigned s = 0;
    while (used.count(s)) ++s;
    used.insert(s);
    v->slot = s;
    now[{v->snapshot.pid, v->snapshot.start_ticks}] = {group(*v), s};
  }
  slots_.swap(now);
}

}  // namespace xport::exporter
