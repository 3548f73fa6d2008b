package ai.dlrm;

import ai.dlrm.internal.DlrmNative;
import java.nio.charset.StandardCharsets;
import java.util.Objects;
import java.util.function.Consumer;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

/**
 * Where libdlrm's log goes (the C ABI's {@code dlrm_set_log_callback}).
 *
 * <p>Every line the library writes (the coordinator's "rendezvous complete", a server's
 * "serves ...", a trainer's "checkpoint of step ...", warnings about rejected or dropped
 * messages) goes to one process-wide sink: by default stderr, as {@code [dlrm LEVEL
 * file:line] message} at INFO and above.
 *
 * <pre>{@code
 * Log.toJavaLogging(Logger.getLogger("dlrm"), LogLevel.INFO);  // into java.util.logging
 * Log.setHandler(m -> myLog.info(m.toString()), LogLevel.WARNING); // any Consumer
 * Log.toStderr(LogLevel.INFO);                                  // back to the default
 * Log.toStderr(LogLevel.OFF);                                   // silence the library
 * }</pre>
 *
 * <p>Threads: a handler runs on whichever library thread logs, one message at a time (the
 * library holds its log lock meanwhile), often a thread the JVM did not start: it is attached
 * to the JVM as a daemon named {@code dlrm-log} for the call. So a handler must be quick,
 * must not call into libdlrm ({@link Engine}, {@link DistributedTrainer}, this class): that
 * deadlocks. What it throws is reported to the thread's uncaught-exception handler and
 * never reaches the library.
 *
 * <p>Ownership: the native side holds the handler (a JNI global reference) until it is
 * replaced; once a call here returns, the previous handler is never called again.
 *
 * <p>Errors: a null level or logger is a {@link NullPointerException} naming it; the
 * library refuses a level it does not know with {@link DlrmException} ({@code
 * INVALID_ARGUMENT}, naming {@code min_level}), changing nothing.
 */
public final class Log {
  static {
    NativeLoader.load();
  }

  private Log() {}

  /**
   * Sends every library message of {@code minLevel} and above to {@code handler}, or to
   * stderr when {@code handler} is null; {@link LogLevel#OFF} silences the library.
   */
  public static void setHandler(Consumer<? super LogMessage> handler, LogLevel minLevel) {
    Objects.requireNonNull(minLevel, "minLevel");
    setHandler(handler, minLevel.code());
  }

  /**
   * Routes the library's log into {@code logger} as {@link LogRecord}s with the {@link
   * LogLevel#javaLevel} of each message, whose source class name is the library's {@code
   * file:line} (so formatters print {@code engine/ps/server_role.cc:48}); the logger's level,
   * filters and handlers apply as usual.
   */
  public static void toJavaLogging(Logger logger, LogLevel minLevel) {
    setHandler(javaLogging(logger), minLevel);
  }

  /** Back to the default sink, stderr, at {@code minLevel} ({@link LogLevel#OFF}: silent). */
  public static void toStderr(LogLevel minLevel) {
    setHandler(null, minLevel);
  }

  /** A handler that hands each message to {@code logger} (see {@link #toJavaLogging}). */
  public static Consumer<LogMessage> javaLogging(Logger logger) {
    Objects.requireNonNull(logger, "logger");
    return m -> {
      Level level = m.level().javaLevel();
      if (!logger.isLoggable(level)) {
        return;
      }
      LogRecord record = new LogRecord(level, m.message());
      record.setLoggerName(logger.getName());
      record.setSourceClassName(m.file() + ":" + m.line()); // no caller inference
      record.setSourceMethodName(null);
      logger.log(record);
    };
  }

  /** The raw level number, as the C ABI takes it (the one way to pass a bad level). */
  static synchronized void setHandler(Consumer<? super LogMessage> handler, int minLevel) {
    DlrmNative.jdlrm_set_log_handler(handler == null ? null : new Sink(handler), minLevel);
  }

  /** What the native trampoline (dlrm.i, jdlrm_log) calls for each message. */
  static final class Sink {
    private final Consumer<? super LogMessage> handler;

    Sink(Consumer<? super LogMessage> handler) {
      this.handler = handler;
    }

    /** The strings arrive as raw UTF-8 (JNI's own strings are modified UTF-8). */
    @SuppressWarnings("unused")
    void deliver(int level, byte[] file, int line, byte[] message) {
      try {
        handler.accept(new LogMessage(LogLevel.ofMessage(level),
            new String(file, StandardCharsets.UTF_8), line,
            new String(message, StandardCharsets.UTF_8)));
      } catch (RuntimeException | Error e) {
        Thread thread = Thread.currentThread();
        thread.getUncaughtExceptionHandler().uncaughtException(thread, e);
      }
    }
  }
}
