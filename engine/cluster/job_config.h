// The part of a config every peer of a multi-process job must share, and how two peers'
// parts differ. The coordinator compares each HELLO's part with the peers admitted before
// it (coordinator.h), so a rank started with another model, optimizer, seed, sharding or
// wire precision is refused at rendezvous naming the fields, instead of training on (a
// learning rate that differs trains silently different replicas) or failing later on a
// message that does not decode.
//
// Per process, and so left out: what WithoutPerProcessFields (config/config.h) clears.
// Everything else is the job's.
//
// Pure functions, any thread. Errors: none thrown; JobConfigDifference reports bytes
// that do not parse as a difference.
#pragma once

#include <string>

#include "engine/config/dlrm.pb.h"

namespace dlrm::cluster {

// config less its per-process fields, serialized deterministically (the same config gives
// the same bytes in every process of a build).
std::string JobConfigOf(const config::DlrmConfig& config);

// "" when `admitted` and `joining` (JobConfigOf bytes) are the same job's, else the
// differences, one per line, as "modified: model.tables[0].dim: 16 -> 32" (admitted's
// value first).
std::string JobConfigDifference(const std::string& admitted, const std::string& joining);

}  // namespace dlrm::cluster
