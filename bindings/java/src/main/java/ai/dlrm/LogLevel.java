package ai.dlrm;

import ai.dlrm.internal.DlrmNative;
import java.util.logging.Level;

/**
 * The levels of libdlrm's log ({@code DLRM_LOG_*} in {@code dlrm/dlrm.h}; the numbers are
 * compile-time constants generated from the header, so they cannot drift). As a threshold
 * ({@link Log#setHandler}), a level passes the messages of that level and above; {@link #OFF}
 * passes none.
 */
public enum LogLevel {
  DEBUG(DlrmNative.DLRM_LOG_DEBUG, Level.FINE),
  INFO(DlrmNative.DLRM_LOG_INFO, Level.INFO),
  WARNING(DlrmNative.DLRM_LOG_WARNING, Level.WARNING),
  ERROR(DlrmNative.DLRM_LOG_ERROR, Level.SEVERE),
  /** Only as a threshold: nothing is logged. */
  OFF(DlrmNative.DLRM_LOG_OFF, Level.OFF);

  private final int code;
  private final Level javaLevel;

  LogLevel(int code, Level javaLevel) {
    this.code = code;
    this.javaLevel = javaLevel;
  }

  /** The numeric {@code DLRM_LOG_*} value. */
  public int code() {
    return code;
  }

  /** The {@code java.util.logging} level of this level: FINE, INFO, WARNING, SEVERE, OFF. */
  public Level javaLevel() {
    return javaLevel;
  }

  /** The level of a message's number; a number above ERROR (newer than this binding) is ERROR. */
  static LogLevel ofMessage(int code) {
    for (LogLevel level : values()) {
      if (level.code == code && level != OFF) {
        return level;
      }
    }
    return code < DEBUG.code ? DEBUG : ERROR;
  }
}
