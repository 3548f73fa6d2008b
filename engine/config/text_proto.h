// Protobuf text format in, with the parser's complaints as one message (configs, the
// checkpoint manifest).
#pragma once

#include <google/protobuf/message.h>

#include <string>

namespace dlrm {

// Parses `text` into *out. Returns "" on success, else every error the parser reported
// ("line 3, column 5: ...; ...").
std::string ParseTextProto(const std::string& text, google::protobuf::Message* out);

}  // namespace dlrm
