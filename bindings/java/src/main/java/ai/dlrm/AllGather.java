package ai.dlrm;

/**
 * A host's all-gather among the trainers of a multi-process job, for a host that already has
 * a collective: Spark's {@code BarrierTaskContext.allGather}, MPI's {@code Allgatherv}, ...
 * Given to {@link DistributedTrainer}, it replaces the built-in collective over the job's
 * transport.
 *
 * <p>The trainer calls it from inside its collective calls ({@link
 * DistributedTrainer#trainStep}, {@link DistributedTrainer#evaluate}, {@link
 * DistributedTrainer#checkpoint}, {@link DistributedTrainer#finish}), on the thread that made
 * that call. Every trainer calls it the same number of times, in the same order.
 *
 * <p>A failure fails the collective call on this trainer with a {@link DlrmException} ({@link
 * StatusCode#NETWORK}) whose message names what was thrown, and which carries it as its
 * cause; the other trainers then fail (or time out) in their own exchange.
 */
@FunctionalInterface
public interface AllGather {
  /**
   * Exchanges this trainer's bytes with every trainer.
   *
   * @param mine this trainer's contribution (a fresh array the callee may keep)
   * @return every trainer's contribution in rank order {@code 0 .. numTrainers-1}, this
   *     trainer's own (unchanged) included; the arrays are copied before this call returns
   *     to the engine
   * @throws Exception any failure (it is reported as the cause of the failed call)
   */
  byte[][] allGather(byte[] mine) throws Exception;
}
