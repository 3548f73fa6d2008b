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
    ++number_;
    const size_t slot_bytes = slot_bytes_;  // this call's (the member may grow below)
    Gathered g;
    const ScopedSigpipeBlock no_sigpipe;
    try {
      g = GatherSlots(contribution, slot_bytes);
      if (g.largest > slot_bytes - sizeof(int64_t)) {
        GatherRest(contribution, slot_bytes, &g);
        slot_bytes_ = g.largest + sizeof(int64_t);  // the same on every rank
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {  // gloo::Exception or gloo::EnforceNotMet
      Throw(StatusCode::kNetwork, "trainer ", rank(), ": gloo all-gather #", number_,
            " failed (a trainer died, hangs, or failed before this step): ", e.what());
    }
    return Assemble(g, slot_bytes);
  }

 private:
  // What one AllGather received: every rank's slot, the sizes they announce, and the bytes
  // that did not fit (rest, rank after rank, rest_counts[r] of rank r's).
  struct Gathered {
    std::vector<char> slots;
    std::vector<int64_t> sizes;
    size_t largest = 0;
    std::vector<size_t> rest_counts;
    std::vector<char> rest;
  };

  // The first collective: each rank's slot of slot_bytes, its size and the bytes that fit.
  Gathered GatherSlots(const std::string& contribution, size_t slot_bytes) const {
    const int32_t n = world_size();
    const size_t fits = slot_bytes - sizeof(int64_t);
    std::vector<char> slot(slot_bytes, 0);
    const auto my_size = static_cast<int64_t>(contribution.size());
    std::memcpy(slot.data(), &my_size, sizeof my_size);
    std::memcpy(slot.data() + sizeof my_size, contribution.data(),
                std::min(contribution.size(), fits));
    Gathered g;
    g.slots.resize(slot_bytes * n);
    gloo::AllgatherOptions options(context_);
    options.setInput(slot.data(), slot.size());
    options.setOutput(g.slots.data(), g.slots.size());
    options.setTimeout(timeout_);
    gloo::allgather(options);
    g.sizes.resize(n);
    g.rest_counts.resize(n);
    for (int32_t r = 0; r < n; ++r) {
      std::memcpy(&g.sizes[r], g.slots.data() + r * slot_bytes, sizeof(int64_t));
      if (g.sizes[r] < 0)
        Throw(StatusCode::kDataLoss, "gloo all-gather #", number_, ": trainer ", r, " announced ",
              g.sizes[r], " bytes");
      const auto size = static_cast<size_t>(g.sizes[r]);
      g.largest = std::max(g.largest, size);
      // One byte more than the overflow, so no rank's part is empty (Gloo wants a buffer
      // on every rank).
      g.rest_counts[r] = size - std::min(size, fits) + 1;
    }
    return g;
  }

  // The second collective, when a part did not fit its slot: an all-gatherv of the rests.
  void GatherRest(const std::string& contribution, size_t slot_bytes, Gathered* g) const {
    const size_t fits = slot_bytes - sizeof(int64_t);
    std::string mine = contribution.size() > fits ? contribution.substr(fits) : "";
    mine.push_back('\0');
    size_t total = 0;
    for (const size_t c : g->rest_counts) total += c;
    g->rest.resize(total);
    gloo::AllgathervOptions v(context_);
    v.setInput(mine.data(), mine.size());
    v.setOutput(g->rest.data(), g->rest_counts);
    v.setTimeout(timeout_);
    gloo::allgatherv(v);
  }

  // Every rank's contribution: its slot's bytes, then its rest.
  std::vector<std::string> Assemble(const Gathered& g, size_t slot_bytes) const {
    const size_t fits = slot_bytes - sizeof(int64_t);
    std::vector<std::string> all(g.sizes.size());
    size_t at = 0;
    for (size_t r = 0; r < all.size(); ++r) {
      const char* in_slot = g.slots.data() + r * slot_bytes + sizeof(int64_t);
      all[r].assign(in_slot, std::min(static_cast<size_t>(g.sizes[r]), fits));
      if (!g.rest.empty()) all[r].append(g.rest.data() + at, g.rest_counts[r] - 1);
      at += g.rest_counts[r];
    }
    return all;
  }

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
