#include "engine/collective/gloo_communicator.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "engine/core/byte_codec.h"
#include "engine/core/log.h"
#include "engine/core/sigpipe.h"
#include "engine/core/status.h"

#ifdef DLRM_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <sys/socket.h>
#endif

namespace dlrm::collective {

#ifdef DLRM_HAVE_GLOO
namespace {

// The numeric address of `host`. Gloo resolves names itself, but crashes on some it cannot
// resolve (seen with Debian's 2022 build), so it is only ever given a numeric one.
std::string NumericAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr)
    Throw(StatusCode::kNetwork, "gloo: cannot resolve the trainer's address '", host,
          "': ", gai_strerror(rc));
  char numeric[NI_MAXHOST];
  const int name_rc = getnameinfo(found->ai_addr, found->ai_addrlen, numeric, sizeof numeric,
                                  nullptr, 0, NI_NUMERICHOST);
  freeaddrinfo(found);
  if (name_rc != 0)
    Throw(StatusCode::kNetwork, "gloo: no numeric address for '", host,
          "': ", gai_strerror(name_rc));
  return numeric;
}

// Gloo's rendezvous store, over the bootstrap all-gather. Gloo's full-mesh connect has
// every rank set its own key, then wait for and get the others'; `set` is therefore a
// collective here (an all-gather of key and value) and get/wait read what it gathered.
class GatherStore : public gloo::rendezvous::Store {
 public:
  explicit GatherStore(Communicator* comm) : comm_(comm) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    ByteWriter out;
    out.PutString(key);
    out.PutArray(data);
    for (const std::string& bytes : comm_->AllGather(std::move(out).Take())) {
      ByteReader in(bytes, "gloo rendezvous");
      const std::string k = in.GetString("key");
      values_[k] = in.GetArray<char>("value");
      in.ExpectEnd();
    }
  }
  std::vector<char> get(const std::string& key) override {
    const auto it = values_.find(key);
    if (it == values_.end())
      Throw(StatusCode::kDataLoss, "gloo rendezvous: no trainer published '", key, "'");
    return it->second;
  }
  void wait(const std::vector<std::string>& keys) override {
    for (const std::string& k : keys) get(k);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    wait(keys);  // everything was gathered by set: nothing to wait for
  }

 private:
  Communicator* comm_;
  std::map<std::string, std::vector<char>> values_;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::unique_ptr<Communicator> bootstrap, const std::string& host,
                   std::chrono::milliseconds timeout)
      : bootstrap_(std::move(bootstrap)), timeout_(timeout) {
    gloo::transport::tcp::attr attr;
    attr.hostname = NumericAddress(host);
    GatherStore store(bootstrap_.get());
    // Gloo's TCP transport writes without MSG_NOSIGNAL (core/sigpipe.h); its device's loop
    // thread starts here and keeps the blocked mask.
    const ScopedSigpipeBlock no_sigpipe;
    try {
      std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
      context_ =
          std::make_shared<gloo::rendezvous::Context>(bootstrap_->rank(), bootstrap_->world_size());
      context_->setTimeout(timeout_);
      context_->connectFullMesh(store, device);
    } catch (const Error&) {
      throw;  // the rendezvous over the bootstrap collective failed: its error says why
    } catch (const std::exception& e) {  // gloo::Exception, or gloo::EnforceNotMet (a bad host)
      Throw(StatusCode::kNetwork, "trainer ", rank(), ": connecting the trainers over Gloo at ",
            host, " failed: ", e.what());
    }
    DLRM_LOG(kInfo) << "trainer " << rank() << ": all-gathers over Gloo (TCP at " << host << ", "
                    << world_size() << " trainers)";
  }

  ~GlooCommunicator() override {
    const ScopedSigpipeBlock no_sigpipe;  // closing may still write to a peer that left
    context_.reset();
  }

  int32_t rank() const override { return bootstrap_->rank(); }
  int32_t world_size() const override { return bootstrap_->world_size(); }

  // One Gloo all-gather of fixed-size slots per call: each rank's slot holds its size and
  // as much of its bytes as fit. Every rank sees every size, so all agree whether a second
  // collective (an all-gatherv of the parts that did not fit) is needed and how large the
  // slots of the next call are: a trainer's contributions keep their size from step to
  // step, so after the first step a step costs one collective.
  std::vector<std::string> AllGather(const std::string& contribution) override {
    const int32_t n = world_size();
    ++number_;
    const size_t slot_bytes = slot_bytes_;  // this call's (the member may grow below)
    const size_t fits = slot_bytes - sizeof(int64_t);
    std::vector<char> slot(slot_bytes, 0);
    const int64_t my_size = static_cast<int64_t>(contribution.size());
    std::memcpy(slot.data(), &my_size, sizeof my_size);
    std::memcpy(slot.data() + sizeof my_size, contribution.data(),
                std::min(contribution.size(), fits));
    std::vector<char> slots(slot_bytes * n);
    std::vector<int64_t> sizes(n);
    std::vector<char> rest;  // the bytes beyond the slots, rank after rank
    std::vector<size_t> rest_counts(n);
    const ScopedSigpipeBlock no_sigpipe;
    try {
      gloo::AllgatherOptions options(context_);
      options.setInput(slot.data(), slot.size());
      options.setOutput(slots.data(), slots.size());
      options.setTimeout(timeout_);
      gloo::allgather(options);
      size_t largest = 0;
      for (int32_t r = 0; r < n; ++r) {
        std::memcpy(&sizes[r], slots.data() + r * slot_bytes, sizeof(int64_t));
        if (sizes[r] < 0)
          Throw(StatusCode::kDataLoss, "gloo all-gather #", number_, ": trainer ", r, " announced ",
                sizes[r], " bytes");
        largest = std::max(largest, static_cast<size_t>(sizes[r]));
        // One byte more than the overflow, so no rank's part is empty (Gloo wants a
        // buffer on every rank).
        rest_counts[r] = static_cast<size_t>(sizes[r]) - std::min<size_t>(sizes[r], fits) + 1;
      }
      if (largest > fits) {
        std::string mine_rest = contribution.size() > fits ? contribution.substr(fits) : "";
        mine_rest.push_back('\0');
        size_t total = 0;
        for (const size_t c : rest_counts) total += c;
        rest.resize(total);
        gloo::AllgathervOptions v(context_);
        v.setInput(mine_rest.data(), mine_rest.size());
        v.setOutput(rest.data(), rest_counts);
        v.setTimeout(timeout_);
        gloo::allgatherv(v);
        slot_bytes_ = largest + sizeof(int64_t);  // the same on every rank
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // gloo::Exception or gloo::EnforceNotMet
      Throw(StatusCode::kNetwork, "trainer ", rank(), ": gloo all-gather #", number_,
            " failed (a trainer died, hangs, or failed before this step): ", e.what());
    }
    std::vector<std::string> all(n);
    size_t at = 0;
    for (int32_t r = 0; r < n; ++r) {
      const size_t size = static_cast<size_t>(sizes[r]);
      const char* in_slot = slots.data() + r * slot_bytes + sizeof(int64_t);
      all[r].assign(in_slot, std::min(size, fits));
      if (!rest.empty()) all[r].append(rest.data() + at, rest_counts[r] - 1);
      at += rest_counts[r];
    }
    return all;
  }

 private:
  std::unique_ptr<Communicator> bootstrap_;  // kept: Gloo's connections outlive nothing else
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  int64_t number_ = 0;
  size_t slot_bytes_ = 4096;  // grown to the largest contribution seen (+ its size)
};

}  // namespace

bool GlooAvailable() { return true; }

std::unique_ptr<Communicator> MakeGlooCommunicator(std::unique_ptr<Communicator> bootstrap,
                                                   const std::string& host,
                                                   std::chrono::milliseconds timeout) {
  if (!bootstrap) ThrowInvalid("MakeGlooCommunicator: no bootstrap communicator");
  return std::make_unique<GlooCommunicator>(std::move(bootstrap), host, timeout);
}

#else  // !DLRM_HAVE_GLOO

bool GlooAvailable() { return false; }

std::unique_ptr<Communicator> MakeGlooCommunicator(std::unique_ptr<Communicator>,
                                                   const std::string&, std::chrono::milliseconds) {
  Throw(StatusCode::kFailedPrecondition,
        "DLRM_COLLECTIVE=gloo: this libdlrm was built without Gloo (install libgloo-dev and "
        "rebuild), or use DLRM_COLLECTIVE=builtin");
}

#endif  // DLRM_HAVE_GLOO

}  // namespace dlrm::collective
