// A fresh, empty directory for the running test, named after the process and the test so that
// parallel test processes never share one. The fixture removes it in TearDown.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace s3stream::testing {

inline std::filesystem::path FreshTestDir(const std::string& prefix) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / (prefix + "-" + std::to_string(getpid()) + "-" +
                                                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace s3stream::testing
