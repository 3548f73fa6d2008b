package ai.dlrm;

import ai.dlrm.internal.DlrmNative;

/**
 * How {@link Engine#export(java.nio.file.Path, ExportPrecision, DensePrecision)} writes the
 * dense parameters (MLPs, cross network).
 */
public enum DensePrecision {
  /** As they are. */
  FP32(0),
  /** Rounded to nearest bfloat16: half their bytes; the loading engine widens them exactly. */
  BF16(DlrmNative.DLRM_EXPORT_DENSE_BF16),
  /** Rounded to nearest IEEE half (finite values past 65504 held at it): half their bytes. */
  FP16(DlrmNative.DLRM_EXPORT_DENSE_FP16);

  final int code;

  DensePrecision(int code) {
    this.code = code;
  }
}
