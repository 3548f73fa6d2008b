// The trainers' all-gather over Gloo (the collective library of PyTorch's CPU backend,
// Debian's libgloo-dev), chosen with DLRM_COLLECTIVE=gloo: a ring all-gather over Gloo's
// own TCP connections. The gathered bytes are the same as the built-in collective's, so
// every rank still reduces them in the one fixed tree and sync training stays bitwise equal
// to one process (Gloo's allreduce is not used: it associates sums by rank count and size).
//
// Gloo's rendezvous (each rank publishes its listening addresses) runs over `bootstrap`,
// the built-in collective, so a job needs no extra store (file system or Redis).
// Gloo does not authenticate its connections: ParseClusterEnv refuses it with DLRM_SECRET.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "engine/collective/communicator.h"

namespace dlrm::collective {

// Whether this build links Gloo (CMake found libgloo-dev).
bool GlooAvailable();

// A Gloo communicator of bootstrap's rank and size, listening on `host` (an IP address or
// name that the other trainers reach, not a wildcard). Collective: every trainer calls it.
// kFailedPrecondition if this build has no Gloo; kNetwork if the connections fail.
std::unique_ptr<Communicator> MakeGlooCommunicator(std::unique_ptr<Communicator> bootstrap,
                                                   const std::string& host,
                                                   std::chrono::milliseconds timeout);

}  // namespace dlrm::collective
