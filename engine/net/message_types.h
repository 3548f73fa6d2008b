// The registry of message types, for names in logs and errors. The transport carries
// messages of any type > 0 but defines only ERROR; each layer above defines the types it
// handles as an enum in its own .proto, checks their contents in its own decoders, and
// registers the enum here, so that a new message edits its layer, not the transport:
//
//   void RegisterMessageTypes() {  // cluster/messages.h; every entry point calls it
//     static const bool once = net::RegisterMessageTypes("cluster", &MessageType_descriptor);
//   }
//
// A type no layer of the process registered is still delivered (the receiving role
// answers "does not handle TYPE_<n>"). Every value of a registered enum other than 0 is a
// type; two layers that use one number for different types are a build defect, reported
// as kInternal by the first lookup after the second registration (the registry's unit
// test registers every layer and lists every type of the build).
//
// Threading: all functions are thread-safe.
#pragma once

#include <google/protobuf/descriptor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dlrm::net {

using MessageType = int32_t;
using EnumDescriptorFn = const google::protobuf::EnumDescriptor* (*)();

// Records `types` for `layer` (read at the next lookup); a layer registered already is
// left as it is. Returns true, for a function-local static initializer.
bool RegisterMessageTypes(const char* layer, EnumDescriptorFn types);

bool IsRegisteredMessageType(MessageType type);
// "LOOKUP", ...; "TYPE_<n>" for a type no layer registered.
std::string MessageTypeName(MessageType type);

struct RegisteredMessageType {
  MessageType type = 0;
  std::string name;
  std::string layer;
};
// Every registered type, by number.
std::vector<RegisteredMessageType> RegisteredMessageTypes();

}  // namespace dlrm::net
