package ai.dlrm.spark;

import java.io.Serializable;

/**
 * What one trainer task reports to the driver.
 *
 * @param rank the trainer's rank (its partition)
 * @param losses the global batch's loss of every step (the same on every trainer)
 * @param logLoss the holdout evaluation's log loss (NaN without holdout parts)
 * @param auc the holdout evaluation's ROC AUC (NaN without holdout parts)
 * @param evalSamples the holdout evaluation's samples (0 without holdout parts)
 */
public record TrainerOutcome(int rank, float[] losses, double logLoss, double auc,
    long evalSamples) implements Serializable {}
