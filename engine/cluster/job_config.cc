#include "engine/cluster/job_config.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/message_differencer.h>

#include "engine/config/config.h"

namespace dlrm::cluster {

std::string JobConfigOf(const config::DlrmConfig& config) {
  const config::DlrmConfig job = WithoutPerProcessFields(config);
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);  // map fields in key order
    job.SerializeToCodedStream(&coded);
  }
  return bytes;
}

std::string JobConfigDifference(const std::string& admitted, const std::string& joining) {
  if (admitted == joining) return "";
  config::DlrmConfig a, b;
  if (!a.ParseFromString(admitted)) return "the admitted peer's job_config does not parse";
  if (!b.ParseFromString(joining)) return "job_config does not parse";
  std::string report;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&report);
  // A field set to its default is the field unset: `seed: 0` is no seed.
  differ.set_message_field_comparison(google::protobuf::util::MessageDifferencer::EQUIVALENT);
  return differ.Compare(a, b) ? "" : report;
}

}  // namespace dlrm::cluster
