#pragma once
// Helpers shared by the lib/data tests: a scratch directory per test, and a check that an error is a
// UsageError whose message mentions what the user needs (the file name, the command to run).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>

#include "core/error.hpp"

namespace hpct::data::testing {

// A fresh directory under the system temp dir, removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() / ("hpct_data_" + std::string(info->test_suite_name()) + "_" +
                                                      info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs fn, expects a hpct::UsageError whose cause contains every one of `needles`.
inline void expect_usage_error(const std::function<void()>& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const hpct::UsageError& e) {
    for (const auto& n : needles)
      EXPECT_NE(e.cause().find(n), std::string::npos) << "'" << n << "' not in: " << e.cause();
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected hpct::UsageError, got another exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected hpct::UsageError, nothing was thrown";
}

}  // namespace hpct::data::testing
