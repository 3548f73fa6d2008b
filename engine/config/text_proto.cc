#include "engine/config/text_proto.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

namespace dlrm {
namespace {

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!text_.empty()) text_ += "; ";
    text_ += "line " + std::to_string(line + 1) + ", column " + std::to_string(column + 1) + ": " +
             message;
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

}  // namespace

std::string ParseTextProto(const std::string& text, google::protobuf::Message* out) {
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (parser.ParseFromString(text, out)) return "";
  return errors.text().empty() ? std::string("parse failed") : errors.text();
}

}  // namespace dlrm
