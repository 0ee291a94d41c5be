// A fresh directory under the system temp dir for one test, removed with
// everything in it on destruction.
#ifndef PIPEPLAN_TESTS_SUPPORT_TEMP_DIR_H_
#define PIPEPLAN_TESTS_SUPPORT_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace pipeplan::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pipeplan-test-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace pipeplan::testing

#endif  // PIPEPLAN_TESTS_SUPPORT_TEMP_DIR_H_
