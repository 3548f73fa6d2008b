package ai.dlrm;

import ai.dlrm.internal.DlrmNative;

/** How {@link Engine#export(java.nio.file.Path, ExportPrecision)} writes the embedding tables. */
public enum ExportPrecision {
  /** Every table as it is. */
  FP32(DlrmNative.DLRM_EXPORT_FP32),
  /** FP32 tables row-wise INT8: a byte per value, then the row's fp16 scale and bias. */
  INT8(DlrmNative.DLRM_EXPORT_INT8),
  /** FP32 tables row-wise INT4: half a byte per value, then the row's fp16 scale and bias. */
  INT4(DlrmNative.DLRM_EXPORT_INT4);

  final int code;

  ExportPrecision(int code) {
    this.code = code;
  }
}
