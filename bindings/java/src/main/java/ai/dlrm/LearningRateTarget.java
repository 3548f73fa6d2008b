package ai.dlrm;

import ai.dlrm.internal.DlrmNative;

/** Which optimizer {@link Engine#setLearningRate(LearningRateTarget, float)} changes. */
public enum LearningRateTarget {
  /** The optimizer of the MLPs. */
  DENSE(DlrmNative.DLRM_LR_DENSE),
  /** The optimizer of the embedding tables. */
  SPARSE(DlrmNative.DLRM_LR_SPARSE),
  /** Both. */
  ALL(DlrmNative.DLRM_LR_ALL);

  final int code;

  LearningRateTarget(int code) {
    this.code = code;
  }
}
