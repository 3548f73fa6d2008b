// The cluster's messages on the wire (cluster.proto): building them, and checking what a
// peer sent before anything reads it. Every Decode throws kDataLoss naming the rule the
// message broke; every Make throws kInvalidArgument for a message its receiver would
// refuse, so a sender learns of a bad message at once.
//
//   HELLO     body Hello: role SERVER or TRAINER, rank >= 0, world_size >= 1, job_config
//             (when present) a DlrmConfig
//   ROSTER    body Roster: world_size >= 1 peers, peers[i].rank == i, SERVER or TRAINER
//   BARRIER   step = the generation
//   SHUTDOWN  to the coordinator: no body, or a Leave body (a failure)
//   HEARTBEAT nothing but the header
#pragma once

#include <cstdint>
#include <string>

#include "engine/cluster/cluster.pb.h"
#include "engine/net/message.h"

namespace dlrm::cluster {

// Registers the cluster's types with the transport's registry (net/message_types.h):
// called by every function here and by the coordinator and its clients; idempotent.
void RegisterMessageTypes();

net::Message MakeHello(const Hello& hello);
Hello DecodeHello(const net::Message& message);

net::Message MakeRoster(const Roster& roster);
Roster DecodeRoster(const net::Message& message);

// SHUTDOWN of a peer that leaves the job: `failure` empty when it is done, else its error.
net::Message MakeLeave(const std::string& failure);
// The failure a SHUTDOWN reports ("" for a peer that is done).
std::string DecodeLeave(const net::Message& message);

net::Message MakeBarrier(int64_t generation);
// The generation.
int64_t DecodeBarrier(const net::Message& message);

}  // namespace dlrm::cluster
