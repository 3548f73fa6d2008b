package ai.dlrm;

import java.nio.charset.StandardCharsets;

/**
 * A call into libdlrm failed. Carries the engine's status code and its message, which names
 * the argument or config field that was wrong (for example {@code batch.labels[2]}).
 *
 * <p>Unchecked, because most failures are programming or data errors that a caller cannot
 * recover from locally; those who can (a missing checkpoint, a bad row) switch on {@link
 * #code()}. A failed call leaves the engine as it was, so the engine stays usable.
 */
public class DlrmException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final StatusCode code;
  private final int rawCode;

  /** An exception with the given code and message. */
  public DlrmException(StatusCode code, String message) {
    this(code, code.code(), message);
  }

  private DlrmException(StatusCode code, int rawCode, String message) {
    super(message);
    this.code = code;
    this.rawCode = rawCode;
  }

  /** The status code, {@link StatusCode#UNKNOWN} for codes newer than this binding. */
  public StatusCode code() {
    return code;
  }

  /** The numeric {@code dlrm_status} exactly as the library returned it. */
  public int rawCode() {
    return rawCode;
  }

  /** Class name, status name and the engine's message, e.g. in stack traces. */
  @Override
  public String toString() {
    String name = code == StatusCode.UNKNOWN ? "status " + rawCode : code.name();
    return getClass().getName() + ": " + name + ": " + getMessage();
  }

  /**
   * Called from the JNI wrapper (dlrm.i) when a call fails. The message arrives as the raw
   * UTF-8 bytes of {@code dlrm_last_error()}, read on the failing thread within the failing
   * call; decoding here (not with JNI's modified UTF-8) keeps any byte sequence safe.
   */
  @SuppressWarnings("unused")
  private static DlrmException fromNative(int status, byte[] utf8Message) {
    String message = new String(utf8Message, StandardCharsets.UTF_8);
    return new DlrmException(StatusCode.of(status), status, message);
  }

  /**
   * As {@link #fromNative(int, byte[])}, for a call that failed because Java code it ran
   * failed: a host's {@link AllGather} threw, or returned something unusable. The message
   * names that failure, which becomes the cause.
   */
  @SuppressWarnings("unused")
  private static DlrmException fromNative(int status, byte[] utf8Message, Throwable cause) {
    String message = new String(utf8Message, StandardCharsets.UTF_8);
    DlrmException e = new DlrmException(
        StatusCode.of(status), status, message + "; the AllGather failed: " + cause);
    e.initCause(cause);
    return e;
  }
}
