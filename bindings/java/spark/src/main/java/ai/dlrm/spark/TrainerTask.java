package ai.dlrm.spark;

import ai.dlrm.Batch;
import ai.dlrm.DistributedTrainer;
import ai.dlrm.EvalResult;
import java.io.Serializable;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.resource.ResourceInformation;
import org.apache.spark.sql.Row;
import scala.collection.Iterator;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;

/**
 * The barrier stage's task: the trainer of one partition. It cuts its rows into parts, agrees
 * with the other tasks on the number of steps (the fewest full parts of any partition, less
 * the holdout) and exchanges the holdout parts through Spark's {@code allGather}, joins the
 * job (its collectives over libdlrm's own transport, executor to executor: through the
 * driver's allGather each cost about a second), trains, evaluates the holdout parts, writes
 * the checkpoint and leaves.
 *
 * <p>Its twin is the PySpark task in bindings/python/dlrm/spark.py: the two must make the same
 * allGather calls in the same order (the part counts, then the holdout rows), or Java and
 * Python trainers would disagree on the steps and the holdout.
 *
 * <p>A retried attempt cannot join a job whose other trainers already left, so once its rows
 * are read (a bad row fails every attempt with the same message) it fails, naming why:
 * restart the fit (from a checkpoint).
 */
final class TrainerTask extends AbstractFunction1<Iterator<Row>, Iterator<TrainerOutcome>>
    implements Serializable {
  private static final long serialVersionUID = 1L;
  /** What device "cuda" needs of Spark, for the refusals. */
  static final String NO_GPU = "needs a GPU for each trainer task: set "
      + "spark.task.resource.gpu.amount=1 and the executors' GPUs "
      + "(spark.executor.resource.gpu.amount, spark.executor.resource.gpu.discoveryScript)";

  private final String config;
  private final FeatureColumns columns;
  private final TrainOptions options;
  private final String coordinator;
  private final int numTrainers;

  TrainerTask(String config, FeatureColumns columns, TrainOptions options, String coordinator,
      int numTrainers) {
    this.config = config;
    this.columns = columns;
    this.options = options;
    this.coordinator = coordinator;
    this.numTrainers = numTrainers;
  }

  @Override
  public Iterator<TrainerOutcome> apply(Iterator<Row> rows) {
    BarrierTaskContext ctx = BarrierTaskContext.get();
    // Rows first: bad data fails every attempt alike, with the same message.
    List<Row> mine = new ArrayList<>();
    rows.foreach(mine::add);
    RowBatcher batcher = new RowBatcher(columns, options.partRows());
    List<Batch> parts = batcher.batches(mine.iterator());
    // As bad data: a task without the GPU it needs fails every attempt alike, at once.
    String device = options.device() == null ? null : taskDevice(ctx, options.device());
    if (ctx.stageAttemptNumber() > 0 || ctx.attemptNumber() > 0) {
      throw new IllegalStateException("a retried trainer task cannot rejoin the libdlrm job "
          + "(stage attempt " + ctx.stageAttemptNumber() + "); fit again, from a checkpoint");
    }
    int steps = agreeOnSteps(ctx, parts.size());
    List<Batch> holdout = exchangeHoldout(ctx, batcher, mine, parts.size());
    TrainerOutcome outcome;
    try (DistributedTrainer trainer =
        new DistributedTrainer(config, cluster(ctx, device), null, null)) {
      outcome = run(trainer, parts.subList(0, steps), holdout);
    }
    return CollectionConverters.asScala(List.of(outcome).iterator());
  }

  /** The fewest full parts of any partition, less the holdout: every trainer's steps. */
  private int agreeOnSteps(BarrierTaskContext ctx, int myParts) {
    int steps = Integer.MAX_VALUE;
    for (String count : ctx.allGather(Integer.toString(myParts))) {
      steps = Math.min(steps, Integer.parseInt(count) - options.holdoutParts());
    }
    if (steps <= 0) {
      throw new IllegalArgumentException("a partition has too few rows: every partition needs "
          + "more than holdoutParts (" + options.holdoutParts() + ") parts of partRows ("
          + options.partRows() + ") rows; this one has " + myParts);
    }
    return steps;
  }

  /**
   * Every trainer's holdout parts, in rank order (a trainer evaluates the same batches on
   * every trainer, each predicting its share): the last holdoutParts full parts of each
   * partition, exchanged as serialized rows.
   */
  private List<Batch> exchangeHoldout(BarrierTaskContext ctx, RowBatcher batcher,
      List<Row> mine, int myParts) {
    if (options.holdoutParts() == 0) {
      return List.of();
    }
    int end = myParts * options.partRows();
    ArrayList<Row> held = new ArrayList<>(mine.subList(end - options.holdoutParts()
        * options.partRows(), end));
    List<Batch> out = new ArrayList<>();
    for (String rank : ctx.allGather(RowCodec.encode(held))) {
      out.addAll(batcher.batches(RowCodec.decode(rank).iterator()));
    }
    return out;
  }

  private TrainerOutcome run(DistributedTrainer trainer, List<Batch> parts, List<Batch> holdout) {
    float[] losses = new float[parts.size()];
    trainer.enqueue(parts.get(0));
    for (int s = 0; s < parts.size(); s++) {
      if (s + 1 < parts.size()) {
        trainer.enqueue(parts.get(s + 1)); // its lookups travel while step s computes
      }
      losses[s] = trainer.trainStep();
    }
    EvalResult eval = holdout.isEmpty() ? null : trainer.evaluate(holdout);
    if (options.checkpointDir() != null) {
      trainer.checkpoint(Path.of(options.checkpointDir()));
    }
    trainer.finish();
    return new TrainerOutcome(trainer.rank(), losses, eval == null ? Double.NaN : eval.logLoss(),
        eval == null ? Double.NaN : eval.auc(), eval == null ? 0 : eval.numSamples());
  }

  /**
   * This trainer's DLRM_* settings: servers are ranks [0, S), trainers [S, S + T); device: its
   * taskDevice (null: the config's).
   */
  private Map<String, String> cluster(BarrierTaskContext ctx, String device) {
    Map<String, String> c = new HashMap<>();
    c.put("DLRM_ROLE", "trainer");
    c.put("DLRM_RANK", Integer.toString(options.servers() + ctx.partitionId()));
    c.put("DLRM_WORLD_SIZE", Integer.toString(options.servers() + numTrainers));
    c.put("DLRM_COORDINATOR", coordinator);
    c.put("DLRM_BIND_ADDRESS",
        SparkTrainer.address(SparkEnv.get().blockManager().blockManagerId().host()));
    c.put("DLRM_TIMEOUT_MS", Long.toString(options.timeoutMs()));
    if (device != null) {
      c.put("DLRM_DEVICE", device);
    }
    return c;
  }

  /** The trainer's DLRM_DEVICE: "cuda" is the GPU Spark assigned to this task. */
  static String taskDevice(BarrierTaskContext ctx, String device) {
    if (!device.equals("cuda")) {
      return device;
    }
    ResourceInformation gpu = ctx.resourcesJMap().get("gpu");
    String[] addresses = gpu == null ? new String[0] : gpu.addresses();
    if (addresses.length == 0) {
      throw new IllegalStateException(
          "device \"cuda\" " + NO_GPU + "; Spark assigned this task none");
    }
    if (!addresses[0].matches("[0-9]+")) {
      throw new IllegalStateException("Spark assigned this task GPU address \"" + addresses[0]
          + "\", which is not a CUDA device ordinal");
    }
    return "cuda:" + addresses[0];
  }
}
