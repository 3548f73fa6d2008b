// The engine's log. Every line libdlrm writes (a server's progress, a rejected message, a
// dropped connection) goes through here to one process-wide sink, so a host decides where
// it goes: the C ABI's dlrm_set_log_callback (Python `logging`, a Java Consumer, Go slog),
// or the `dlrm` tool, which forwards to glog. The library itself links no logging library.
// The default sink writes "[dlrm LEVEL file:line] message" lines to stderr.
//
//   DLRM_LOG(kWarning) << "server " << index << ": dropped " << what;
//
// The stream is evaluated only when the level passes the sink's threshold.
// Thread safety: DLRM_LOG may be used from any thread; the sink is called under one lock,
// so it sees one message at a time and need not be thread-safe itself, and it must not log
// or set the sink (that would deadlock). SetLogSink may race with logging threads: a
// message goes to the old sink or the new one, whole.
#pragma once

#include <cstdint>
#include <functional>
#include <sstream>
#include <string>

namespace dlrm {

// The values of the C ABI's DLRM_LOG_* levels (static_asserts in capi/c_api.cc).
enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kOff = 4 };

const char* LogLevelName(LogLevel level);  // "DEBUG", "INFO", ...

// file: the source file (a path), line: its line; message without a trailing newline.
using LogSink =
    std::function<void(LogLevel level, const char* file, int line, const std::string& message)>;

// Messages below min_level are not formatted at all; kOff silences the log. A null sink
// restores the default (stderr).
void SetLogSink(LogSink sink, LogLevel min_level);

bool LogEnabled(LogLevel level);
void Log(LogLevel level, const char* file, int line, const std::string& message);

// Whether the count-th occurrence (1-based) of a repeated event is logged: the first
// kLogFirstOccurrences one by one, then every kLogEveryOccurrences-th. A flood of
// rejected, dropped or failed messages (a forger, a dead peer) must not flood the log;
// the lines that are written carry the count.
inline constexpr int64_t kLogFirstOccurrences = 10;
inline constexpr int64_t kLogEveryOccurrences = 1000;
inline bool ShouldLogOccurrence(int64_t count) {
  return count <= kLogFirstOccurrences || count % kLogEveryOccurrences == 0;
}

// One message, sent to the sink when the statement ends.
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line) : level_(level), file_(file), line_(line) {}
  ~LogLine() { Log(level_, file_, line_, stream_.str()); }
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream stream_;
};

// Turns the streamed expression into void for DLRM_LOG's conditional.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace dlrm

// A whole expression (no dangling else): `&` binds looser than `<<`, so the message is
// streamed first and the statement's value is void either way.
#define DLRM_LOG(level)                        \
  !::dlrm::LogEnabled(::dlrm::LogLevel::level) \
      ? (void)0                                \
      : ::dlrm::LogVoidify() &                 \
            ::dlrm::LogLine(::dlrm::LogLevel::level, __FILE__, __LINE__).stream()
