// A private scratch directory for segment files, removed with its contents.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace xport::telemetry::test {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/xport-telemetry-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    if (DIR* d = ::opendir(path_.c_str())) {
      while (dirent* e = ::readdir(d)) {
        std::string n = e->d_name;
        if (n != "." && n != "..") ::unlink((path_ + "/" + n).c_str());
      }
      ::closedir(d);
    }
    ::rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace xport::telemetry::test
