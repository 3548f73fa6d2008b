#include "engine/net/message_types.h"

#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "engine/core/status.h"
#include "engine/net/wire.pb.h"

namespace dlrm::net {
namespace {

class Registry {
 public:
  static Registry& Get() {
    static Registry* registry = [] {  // never destroyed: used by static code
      auto* r = new Registry();
      r->Add("net", &NetMessageType_descriptor);
      return r;
    }();
    return *registry;
  }

  void Add(const char* layer, EnumDescriptorFn types) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& source : sources_)
      if (source.first == layer) return;
    sources_.emplace_back(layer, types);
    built_ = false;
  }

  std::optional<RegisteredMessageType> Find(MessageType type) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto& table = Table();
    const auto it = table.find(type);
    if (it == table.end()) return std::nullopt;
    return it->second;
  }

  std::vector<RegisteredMessageType> All() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<RegisteredMessageType> all;
    for (const auto& [type, entry] : Table()) all.push_back(entry);
    return all;
  }

 private:
  // The table, built on first use from the enums registered so far; mu_ is held.
  const std::map<MessageType, RegisteredMessageType>& Table() {
    if (!built_) Build();
    return table_;
  }

  void Build() {
    table_.clear();
    for (const auto& [layer, types] : sources_) {
      const google::protobuf::EnumDescriptor* d = types();
      for (int i = 0; i < d->value_count(); ++i) Insert(layer, *d->value(i));
    }
    built_ = true;
  }

  void Insert(const std::string& layer, const google::protobuf::EnumValueDescriptor& v) {
    if (v.number() == 0) return;  // the enum's UNSPECIFIED
    auto [it, inserted] =
        table_.emplace(v.number(), RegisteredMessageType{v.number(), v.name(), layer});
    if (!inserted && (it->second.name != v.name() || it->second.layer != layer))
      Throw(StatusCode::kInternal, "message type ", v.number(), " is both ", it->second.name,
            " of layer ", it->second.layer, " and ", v.name(), " of layer ", layer,
            ": each message type needs its own number");
  }

  std::mutex mu_;
  std::vector<std::pair<std::string, EnumDescriptorFn>> sources_;
  std::map<MessageType, RegisteredMessageType> table_;
  bool built_ = false;
};

}  // namespace

bool RegisterMessageTypes(const char* layer, EnumDescriptorFn types) {
  Registry::Get().Add(layer, types);
  return true;
}

bool IsRegisteredMessageType(MessageType type) { return Registry::Get().Find(type).has_value(); }

std::string MessageTypeName(MessageType type) {
  const std::optional<RegisteredMessageType> entry = Registry::Get().Find(type);
  return entry ? entry->name : "TYPE_" + std::to_string(type);
}

std::vector<RegisteredMessageType> RegisteredMessageTypes() { return Registry::Get().All(); }

}  // namespace dlrm::net
