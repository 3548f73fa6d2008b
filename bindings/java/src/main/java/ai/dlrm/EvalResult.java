package ai.dlrm;

/**
 * Metrics of {@link Engine#evaluate} over all samples of the evaluated batches.
 *
 * @param logLoss mean binary cross-entropy of the predicted click probabilities
 * @param auc ROC AUC; {@code NaN} when the labels hold one class only
 * @param numSamples number of samples evaluated
 */
public record EvalResult(double logLoss, double auc, long numSamples) {}
