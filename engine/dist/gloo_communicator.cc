#include "engine/dist/gloo_communicator.h"

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include <glog/logging.h>

#include "engine/core/byte_codec.h"
#include "engine/core/status.h"

#ifdef DLRM_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#endif

namespace dlrm::dist {

std::string EndpointHost(const std::string& endpoint) {
  const std::string scheme = "tcp://";
  std::string rest = endpoint.rfind(scheme, 0) == 0 ? endpoint.substr(scheme.size()) : endpoint;
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0)
    ThrowInvalid("endpoint '", endpoint, "' is not tcp://host:port");
  rest = rest.substr(0, colon);
  if (rest.size() >= 2 && rest.front() == '[' && rest.back() == ']')
    rest = rest.substr(1, rest.size() - 2);
  return rest;
}

#ifdef DLRM_HAVE_GLOO
namespace {

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
    attr.hostname = host;
    GatherStore store(bootstrap_.get());
    try {
      std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(bootstrap_->rank(),
                                                             bootstrap_->world_size());
      context_->setTimeout(timeout_);
      context_->connectFullMesh(store, device);
    } catch (const gloo::Exception& e) {
      Throw(StatusCode::kNetwork, "trainer ", rank(), ": connecting the trainers over Gloo at ",
            host, " failed: ", e.what());
    }
    LOG(INFO) << "trainer " << rank() << ": all-gathers over Gloo (TCP at " << host << ", "
              << world_size() << " trainers)";
  }

  int32_t rank() const override { return bootstrap_->rank(); }
  int32_t world_size() const override { return bootstrap_->world_size(); }

  std::vector<std::string> AllGather(const std::string& contribution) override {
    const int32_t n = world_size();
    ++number_;
    // Every contribution travels with one trailing byte, so no rank's part is empty (Gloo
    // wants a buffer on every rank).
    std::string mine = contribution;
    mine.push_back('\0');
    std::vector<int64_t> sizes(n);
    std::vector<char> gathered;
    try {
      int64_t my_size = static_cast<int64_t>(mine.size());
      gloo::AllgatherOptions size_options(context_);
      size_options.setInput(&my_size, 1);
      size_options.setOutput(sizes.data(), sizes.size());
      size_options.setTimeout(timeout_);
      gloo::allgather(size_options);

      std::vector<size_t> counts(n);
      size_t total = 0;
      for (int32_t r = 0; r < n; ++r) {
        if (sizes[r] < 1)
          Throw(StatusCode::kDataLoss, "gloo all-gather #", number_, ": trainer ", r,
                " announced ", sizes[r], " bytes");
        counts[r] = static_cast<size_t>(sizes[r]);
        total += counts[r];
      }
      gathered.resize(total);
      gloo::AllgathervOptions options(context_);
      options.setInput(mine.data(), mine.size());
      options.setOutput(gathered.data(), counts);
      options.setTimeout(timeout_);
      gloo::allgatherv(options);
    } catch (const gloo::Exception& e) {
      Throw(StatusCode::kNetwork, "trainer ", rank(), ": gloo all-gather #", number_,
            " failed (a trainer died, hangs, or failed before this step): ", e.what());
    }
    std::vector<std::string> all(n);
    size_t at = 0;
    for (int32_t r = 0; r < n; ++r) {
      const size_t size = static_cast<size_t>(sizes[r]);
      all[r].assign(gathered.data() + at, size - 1);
      at += size;
    }
    return all;
  }

 private:
  std::unique_ptr<Communicator> bootstrap_;  // kept: Gloo's connections outlive nothing else
  const std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  int64_t number_ = 0;
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
                                                   const std::string&,
                                                   std::chrono::milliseconds) {
  Throw(StatusCode::kFailedPrecondition,
        "DLRM_COLLECTIVE=gloo: this libdlrm was built without Gloo (install libgloo-dev and "
        "rebuild), or use DLRM_COLLECTIVE=builtin");
}

#endif  // DLRM_HAVE_GLOO

}  // namespace dlrm::dist
