// A temporary directory for one test, removed with everything in it when destroyed.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace adam::testing {

class TmpDir {
 public:
  TmpDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "adam-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TmpDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace adam::testing
