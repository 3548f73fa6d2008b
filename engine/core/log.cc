#include "engine/core/log.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>

namespace dlrm {
namespace {

// "engine/net/endpoint.cc" rather than the build machine's absolute path: the path from
// its last "/engine/" on.
const char* ShortFile(const char* file) {
  const char* from = file;
  for (const char* p = std::strstr(file, "/engine/"); p != nullptr;
       p = std::strstr(p + 1, "/engine/"))
    from = p + 1;
  return from;
}

void StderrSink(LogLevel level, const char* file, int line, const std::string& message) {
  std::fprintf(stderr, "[dlrm %s %s:%d] %s\n", LogLevelName(level), ShortFile(file), line,
               message.c_str());
}

struct SinkState {
  std::mutex mu;  // held while the sink runs: one message at a time
  LogSink sink = StderrSink;
  std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};
};

SinkState& State() {
  static SinkState* state = new SinkState;  // never destroyed: threads may log at exit
  return *state;
}

}  // namespace

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kOff: return "OFF";
  }
  return "UNKNOWN";
}

void SetLogSink(LogSink sink, LogLevel min_level) {
  SinkState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sink = sink ? std::move(sink) : LogSink(StderrSink);
  s.min_level.store(static_cast<int>(min_level), std::memory_order_relaxed);
}

bool LogEnabled(LogLevel level) {
  return level != LogLevel::kOff &&
         static_cast<int>(level) >= State().min_level.load(std::memory_order_relaxed);
}

void Log(LogLevel level, const char* file, int line, const std::string& message) {
  if (!LogEnabled(level)) return;
  SinkState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sink(level, ShortFile(file), line, message);
}

}  // namespace dlrm
