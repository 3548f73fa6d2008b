// A forger for the tests of issue 17, acceptance 7: sends a running job's members
// (coordinator, servers, trainers) messages they must drop, from connections of its own,
// without DLRM_SECRET. Half are well formed and name real ranks and steps near the job's
// (UPDATE, LOOKUP, FLUSH, SAVE, SHUTDOWN and HEARTBEAT to the servers, ALLGATHER
// contributions to the trainers, HELLO, BARRIER, SHUTDOWN and HEARTBEAT to the
// coordinator); the other half are raw frames that break the wire format. It never waits
// for an answer. Deterministic for a seed. Not thread-safe: one thread drives it.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/cluster/messages.h"
#include "engine/collective/collective.pb.h"
#include "engine/collective/net_communicator.h"
#include "engine/net/endpoint.h"
#include "engine/net/zmq_socket.h"
#include "engine/ps/messages.h"

namespace dlrm::testing {

class Forger {
 public:
  struct Targets {
    std::string coordinator;            // "" for none
    std::vector<std::string> servers;   // by server index
    std::vector<std::string> trainers;  // by trainer index
  };

  // save_dir: the directory forged SAVEs name; nothing may ever be written there.
  Forger(const net::Context& context, const Targets& targets, const std::string& save_dir,
         uint32_t seed)
      : targets_(targets), save_dir_(save_dir), random_(seed) {
    ps::RegisterMessageTypes();
    collective::RegisterMessageTypes();
    cluster::RegisterMessageTypes();
    auto add = [&](const std::string& address, Kind kind) {
      Target t;
      t.kind = kind;
      t.endpoint = std::make_unique<net::Endpoint>(context, net::Endpoint::kConnect, address,
                                                   net::TransportOptions{}, "forged target");
      t.raw = std::make_unique<net::ZmqSocket>(context, net::ZmqSocket::kDealer,
                                               net::TransportOptions{});
      t.raw->Connect(address);
      all_.push_back(std::move(t));
    };
    if (!targets.coordinator.empty()) add(targets.coordinator, kCoordinator);
    for (const std::string& a : targets.servers) add(a, kServer);
    for (const std::string& a : targets.trainers) add(a, kTrainer);
  }

  // Sends n more messages, each to a random target.
  void Send(int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      Target& t = all_[Uniform(0, static_cast<int64_t>(all_.size()) - 1)];
      if (Uniform(0, 1) == 0) {
        SendRaw(t);
      } else {
        t.endpoint->Send(Forged(t.kind));
      }
      ++sent_;
    }
  }

  int64_t sent() const { return sent_; }

 private:
  enum Kind { kCoordinator, kServer, kTrainer };
  struct Target {
    Kind kind;
    std::unique_ptr<net::Endpoint> endpoint;
    std::unique_ptr<net::ZmqSocket> raw;
  };

  int64_t Uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(random_);
  }

  net::Payload RandomPayload() {
    const int64_t count = Uniform(0, 64);
    if (Uniform(0, 1) == 0) {
      net::Payload p = net::Payload::Zeros<float>(count);
      for (int64_t i = 0; i < count; ++i)
        p.mutable_data<float>()[i] = static_cast<float>(Uniform(-1000, 1000)) / 7.0f;
      return p;
    }
    std::vector<uint8_t> bytes(static_cast<size_t>(count));
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(Uniform(0, 255));
    return net::Payload::Copy(bytes.data(), count);
  }

  // A well-formed message a member of kind `kind` would act on, were it genuine.
  net::Message Forged(Kind kind) {
    const auto rank = static_cast<int32_t>(Uniform(0, 3));
    const int64_t step = Uniform(0, 30);
    net::Message m;
    switch (kind) {
      case kServer: m = ForgedForServer(step); break;
      case kTrainer:
        m = net::MakeMessage(collective::ALLGATHER);
        m.header.set_step(step);
        m.payloads.push_back(RandomPayload());
        break;
      case kCoordinator: m = ForgedForCoordinator(rank, step); break;
    }
    m.header.set_sender_rank(kind == kCoordinator ? rank : rank % 2);
    m.header.set_request_id(static_cast<uint64_t>(Uniform(0, 1 << 20)));
    return m;
  }

  net::Message ForgedForServer(int64_t step) {
    switch (Uniform(0, 5)) {
      case 0: {
        net::Message m = net::MakeMessage(ps::UPDATE);
        m.header.set_step(step);
        m.payloads.push_back(RandomPayload());
        m.payloads.push_back(RandomPayload());
        return m;
      }
      case 1: {
        ps::ShardRows rows;
        rows.shard = static_cast<int32_t>(Uniform(0, 3));
        for (int i = 0; i < 4; ++i) rows.ids.push_back(Uniform(0, 99));
        return ps::EncodeLookup(step, {rows});
      }
      case 2: return ps::StepMessage(ps::FLUSH, step);
      case 3: return ps::StepMessage(ps::SAVE, step, save_dir_);
      case 4: return net::MakeMessage(cluster::SHUTDOWN);
      default: return net::MakeMessage(cluster::HEARTBEAT);
    }
  }

  net::Message ForgedForCoordinator(int32_t rank, int64_t step) {
    switch (Uniform(0, 3)) {
      case 0: return cluster::MakeBarrier(step % 3);
      case 1: return net::MakeMessage(cluster::SHUTDOWN);
      case 2: {
        cluster::Hello hello;
        hello.set_role(rank < 2 ? cluster::ROLE_SERVER : cluster::ROLE_TRAINER);
        hello.set_rank(rank);
        hello.set_world_size(4);
        return cluster::MakeHello(hello);
      }
      default: return net::MakeMessage(cluster::HEARTBEAT);
    }
  }

  // 1-3 frames of random bytes, or a real header followed by frames it does not describe.
  void SendRaw(Target& t) {
    std::vector<std::shared_ptr<net::Frame>> frames;
    const int64_t n = Uniform(1, 3);
    for (int64_t i = 0; i < n; ++i) {
      auto f = std::make_shared<net::Frame>(static_cast<size_t>(Uniform(0, 48)));
      for (uint8_t& b : *f) b = static_cast<uint8_t>(Uniform(0, 255));
      frames.push_back(std::move(f));
    }
    if (Uniform(0, 1) == 0) {
      net::Header h;
      h.set_version(net::kWireVersion);
      h.set_type(static_cast<int32_t>(Uniform(0, 40)));
      h.set_sender_rank(static_cast<int32_t>(Uniform(0, 3)));
      h.set_step(Uniform(0, 30));
      const std::string bytes = h.SerializeAsString();
      frames[0] = std::make_shared<net::Frame>(bytes.begin(), bytes.end());
    }
    t.raw->TrySend(nullptr, frames);  // dropped when ZeroMQ would block: a forger may lose some
  }

  const Targets targets_;
  const std::string save_dir_;
  std::mt19937_64 random_;
  std::vector<Target> all_;
  int64_t sent_ = 0;
};

}  // namespace dlrm::testing
