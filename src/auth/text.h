// Small text helpers the credential sources share: tokens and names come with stray whitespace.
#pragma once

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace s3stream::internal {

inline std::string Trimmed(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// A token file's content, trimmed (read again at each fetch: such files rotate); none if unreadable.
inline std::optional<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return std::nullopt;
  return Trimmed(text.str());
}

}  // namespace s3stream::internal
