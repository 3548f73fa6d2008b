#include <cctype>
#include <string>

#include "engine/core/status.h"
#include "tools/commands.h"

namespace dlrm::tools {

config::TableConfig::Precision PrecisionFlag(
    const char* flag, const std::string& value,
    std::initializer_list<config::TableConfig::Precision> allowed) {
  std::string upper = value;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  config::TableConfig::Precision p = config::TableConfig::FP32;
  const bool parsed = config::TableConfig::Precision_Parse(upper, &p);
  std::string names;
  for (const config::TableConfig::Precision a : allowed) {
    if (parsed && a == p) return p;
    std::string name = config::TableConfig::Precision_Name(a);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    names += (names.empty() ? "" : a == *(allowed.end() - 1) ? " or " : ", ") + name;
  }
  ThrowInvalid(flag, " must be ", names, ", got '", value, "'");
}

}  // namespace dlrm::tools
