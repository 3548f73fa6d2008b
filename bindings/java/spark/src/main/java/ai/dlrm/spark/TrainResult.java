package ai.dlrm.spark;

import java.util.List;

/**
 * What a {@link SparkTrainer#fit} job did.
 *
 * @param trainers the number of trainers (the DataFrame's partitions)
 * @param outcomes each trainer's report, by rank
 * @param checkpointDir the sharded checkpoint of the last step, or null
 */
public record TrainResult(int trainers, List<TrainerOutcome> outcomes, String checkpointDir) {
  /** The loss of every step (trainer 0's; every trainer has the same). */
  public float[] losses() {
    return outcomes.get(0).losses();
  }

  /** The holdout evaluation (trainer 0's; every trainer has the same). */
  public TrainerOutcome evaluation() {
    return outcomes.get(0);
  }
}
