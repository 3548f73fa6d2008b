package ai.dlrm;

import ai.dlrm.internal.DlrmNative;

/**
 * The status codes of the C ABI ({@code dlrm_status}). The numbers are compile-time
 * constants generated from {@code dlrm/dlrm.h}, so this enum cannot drift from the header.
 */
public enum StatusCode {
  OK(DlrmNative.DLRM_OK),
  /** A bad argument, batch field or config field. */
  INVALID_ARGUMENT(DlrmNative.DLRM_INVALID_ARGUMENT),
  /** For example an id outside its table's rows. */
  OUT_OF_RANGE(DlrmNative.DLRM_OUT_OF_RANGE),
  /** A file could not be read or written. */
  IO(DlrmNative.DLRM_IO),
  NETWORK(DlrmNative.DLRM_NETWORK),
  TIMEOUT(DlrmNative.DLRM_TIMEOUT),
  CANCELLED(DlrmNative.DLRM_CANCELLED),
  /** A bug in libdlrm: please report it. */
  INTERNAL(DlrmNative.DLRM_INTERNAL),
  /** For example training diverged, or a checkpoint of another model. */
  FAILED_PRECONDITION(DlrmNative.DLRM_FAILED_PRECONDITION),
  NOT_FOUND(DlrmNative.DLRM_NOT_FOUND),
  /** A corrupted or truncated checkpoint. */
  DATA_LOSS(DlrmNative.DLRM_DATA_LOSS),
  /** Out of memory. */
  RESOURCE_EXHAUSTED(DlrmNative.DLRM_RESOURCE_EXHAUSTED),
  /** A code added to the library after this binding was built. */
  UNKNOWN(-1);

  private final int code;

  StatusCode(int code) {
    this.code = code;
  }

  /** The numeric value of {@code dlrm_status}. */
  public int code() {
    return code;
  }

  /** The constant for a numeric status; {@link #UNKNOWN} for numbers this binding does not know. */
  public static StatusCode of(int code) {
    for (StatusCode status : values()) {
      if (status.code == code && status != UNKNOWN) {
        return status;
      }
    }
    return UNKNOWN;
  }
}
