package ai.dlrm.spark;

import ai.dlrm.Batch;
import ai.dlrm.Engine;
import ai.dlrm.EvalResult;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The Spark test (ctest spark_fit_test, run by spark-submit on a local cluster of two
 * executor JVMs): a 2-partition DataFrame trained by {@link SparkTrainer} in sync mode gives
 * bitwise the losses and holdout evaluation of one {@link Engine} trained in this driver on
 * the same global batches, and writes its checkpoint; a DataFrame with a null fails the fit
 * with a message naming the column and row. Exit status 0 when all holds.
 *
 * <p>usage: SparkFitCheck TMPDIR
 */
public final class SparkFitCheck {
  private static final int PART_ROWS = 64;
  private static final int PARTS_PER_PARTITION = 6; // 5 trained, 1 held out
  private static final String CONFIG = String.join("\n",
      "model {",
      "  num_dense_features: 3",
      "  tables { name: 't0' num_rows: 200 dim: 8 }",
      "  tables { name: 't1' num_rows: 50 dim: 8 }",
      "  sparse_features { name: 'c0' table: 't0' }",
      "  sparse_features { name: 'c1' table: 't1' pooling: MEAN }",
      "  bottom_mlp { layer_sizes: 16 layer_sizes: 8 }",
      "  top_mlp { layer_sizes: 16 layer_sizes: 1 }",
      "}",
      "dense_optimizer { learning_rate: 0.01 adam {} }",
      "sparse_optimizer { learning_rate: 0.05 rowwise_adagrad {} }",
      "seed: 11 num_threads: 1 reduction_chunk_rows: 32",
      "sharding { data_parallel_max_bytes: 0 }");
  private static final FeatureColumns COLUMNS =
      new FeatureColumns("click", List.of("d0", "d1", "d2"), List.of("c0", "c1"));

  public static void main(String[] args) throws Exception {
    Path tmp = Path.of(args[0]);
    SparkSession spark = SparkSession.builder().appName("libdlrm SparkFitCheck").getOrCreate();
    boolean ok;
    try {
      // 0 servers: the trainers own the embedding shards.
      ok = checkBitwise(spark, tmp, 2) & checkBitwise(spark, tmp, 0) & checkBadRow(spark)
          & checkDevice(spark);
    } finally {
      spark.stop();
    }
    System.out.println(ok ? "SparkFitCheck: PASSED" : "SparkFitCheck: FAILED");
    System.exit(ok ? 0 : 1);
  }

  private static boolean checkBitwise(SparkSession spark, Path tmp, int servers)
      throws Exception {
    Dataset<Row> df = frame(spark, rows(2 * PARTS_PER_PARTITION * PART_ROWS, -1));
    List<List<Row>> partitions = df.javaRDD().glom().collect();
    Path ckpt = tmp.resolve("spark_ckpt_" + servers);
    deleteTree(ckpt); // an earlier run's MANIFEST proves nothing
    long start = System.nanoTime();
    // device "cpu" reaches each trainer as DLRM_DEVICE (the config's device otherwise).
    TrainResult r = SparkTrainer.fit(spark, df, CONFIG, COLUMNS,
        TrainOptions.of(PART_ROWS).withServers(servers).withHoldoutParts(1)
            .withCheckpointDir(ckpt.toString()).withTimeoutMs(30_000)
            .withDevice(servers == 0 ? "cpu" : null));
    System.out.printf("SparkFitCheck: fit of %d steps on %d trainers, %d servers took %.1f s%n",
        r.losses().length, r.trainers(), servers, (System.nanoTime() - start) / 1e9);
    boolean ok = check(r.trainers() == 2, "2 trainers");
    ok &= check(r.losses().length == PARTS_PER_PARTITION - 1, "5 steps");
    try (Engine engine = Engine.create(CONFIG)) {
      RowBatcher batcher = new RowBatcher(COLUMNS, 2 * PART_ROWS);
      for (int s = 0; s < r.losses().length; s++) {
        float want = engine.trainStep(batcher.batch(globalRows(partitions, s), 0));
        ok &= check(Float.floatToRawIntBits(want) == Float.floatToRawIntBits(r.losses()[s]),
            "step " + s + " loss " + r.losses()[s] + " == one process " + want);
      }
      RowBatcher parts = new RowBatcher(COLUMNS, PART_ROWS);
      List<Batch> holdout = new ArrayList<>(); // every partition's last part, in order
      for (List<Row> p : partitions) {
        holdout.add(parts.batch(p.subList(p.size() - PART_ROWS, p.size()), 0));
      }
      EvalResult want = engine.evaluate(holdout);
      TrainerOutcome got = r.evaluation();
      ok &= check(Double.doubleToRawLongBits(want.auc()) == Double.doubleToRawLongBits(got.auc())
          && Double.doubleToRawLongBits(want.logLoss())
              == Double.doubleToRawLongBits(got.logLoss())
          && got.evalSamples() == 2 * PART_ROWS, "holdout " + got + " == one process " + want);
    }
    ok &= check(Files.exists(ckpt.resolve("MANIFEST")), "checkpoint written");
    return ok;
  }

  /** A null dense value in partition 1 fails the fit, naming the column and row. */
  private static boolean checkBadRow(SparkSession spark) {
    Dataset<Row> df = frame(spark, rows(2 * 2 * PART_ROWS, 2 * PART_ROWS + 7));
    try {
      SparkTrainer.fit(spark, df, CONFIG, COLUMNS, TrainOptions.of(PART_ROWS).withTimeoutMs(5_000));
      return check(false, "a null dense value fails the fit");
    } catch (RuntimeException e) {
      String all = String.valueOf(e);
      for (Throwable c = e.getCause(); c != null; c = c.getCause()) {
        all += " | " + c;
      }
      return check(all.contains("column \"d1\", row 7: null"), "bad row named: " + all);
    }
  }

  /**
   * device "cuda" puts each trainer on the GPU Spark assigned its task; this session gives
   * tasks none, so the fit is refused naming the setting before anything starts. A bad device
   * name is refused when given.
   */
  private static boolean checkDevice(SparkSession spark) {
    boolean ok;
    try {
      TrainOptions.of(PART_ROWS).withDevice("gpu");
      ok = check(false, "device \"gpu\" refused");
    } catch (IllegalArgumentException e) {
      ok = check(e.getMessage().contains("device must be null"), "bad device named: " + e);
    }
    Dataset<Row> df = frame(spark, rows(2 * 2 * PART_ROWS, -1));
    try {
      SparkTrainer.fit(spark, df, CONFIG, COLUMNS,
          TrainOptions.of(PART_ROWS).withTimeoutMs(5_000).withDevice("cuda"));
      ok = check(false, "device cuda without a GPU resource fails the fit");
    } catch (IllegalArgumentException e) {
      ok &= check(e.getMessage().contains("spark.task.resource.gpu.amount"),
          "missing GPU resource named: " + e);
    }
    // "cuda:0" reaches every trainer as DLRM_DEVICE: on this machine (no GPU) they leave
    // naming why, and the roles' errors say so.
    try {
      SparkTrainer.fit(spark, df, CONFIG, COLUMNS,
          TrainOptions.of(PART_ROWS).withTimeoutMs(30_000).withDevice("cuda:0"));
      return check(false, "device cuda:0 trained without a GPU");
    } catch (RuntimeException e) {
      String all = String.valueOf(e);
      for (Throwable s : e.getSuppressed()) {
        all += " | " + s;
      }
      return ok & check(all.matches("(?s).*(no usable CUDA device|built without CUDA).*"),
          "cuda:0 reached the trainers: " + all);
    }
  }

  /** Step s's global batch: partition 0's part s, then partition 1's. */
  private static List<Row> globalRows(List<List<Row>> partitions, int s) {
    List<Row> out = new ArrayList<>();
    for (List<Row> p : partitions) {
      out.addAll(p.subList(s * PART_ROWS, (s + 1) * PART_ROWS));
    }
    return out;
  }

  /** n synthetic rows (d1 of row nullRow null): a planted click model, 0..3 ids per bag. */
  private static List<Row> rows(int n, int nullRow) {
    SplittableRandom rng = new SplittableRandom(5);
    List<Row> out = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      double d0 = rng.nextDouble();
      Double d1 = i == nullRow ? null : rng.nextDouble();
      long[] c0 = ids(rng, 200);
      long[] c1 = ids(rng, 50);
      boolean click = d0 + (c0.length > 0 && c0[0] % 3 == 0 ? 0.5 : 0) > 0.8;
      out.add(RowFactory.create(d0, d1, (float) rng.nextDouble(), click ? 1 : 0, c0, c1));
    }
    return out;
  }

  private static long[] ids(SplittableRandom rng, int rows) {
    long[] bag = new long[rng.nextInt(4)];
    for (int k = 0; k < bag.length; k++) {
      bag[k] = rng.nextInt(rows);
    }
    return bag;
  }

  private static Dataset<Row> frame(SparkSession spark, List<Row> rows) {
    StructType schema = new StructType(new StructField[] {
        DataTypes.createStructField("d0", DataTypes.DoubleType, false),
        DataTypes.createStructField("d1", DataTypes.DoubleType, true),
        DataTypes.createStructField("d2", DataTypes.FloatType, false),
        DataTypes.createStructField("click", DataTypes.IntegerType, false),
        DataTypes.createStructField("c0", DataTypes.createArrayType(DataTypes.LongType), true),
        DataTypes.createStructField("c1", DataTypes.createArrayType(DataTypes.LongType), true)});
    JavaSparkContext jsc = JavaSparkContext.fromSparkContext(spark.sparkContext());
    return spark.createDataFrame(jsc.parallelize(rows, 2), schema);
  }

  private static void deleteTree(Path dir) throws java.io.IOException {
    if (Files.exists(dir)) {
      try (java.util.stream.Stream<Path> paths = Files.walk(dir)) {
        for (Path p : paths.sorted(java.util.Comparator.reverseOrder()).toList()) {
          Files.delete(p);
        }
      }
    }
  }

  private static boolean check(boolean cond, String what) {
    System.out.println((cond ? "  ok   " : "  FAIL ") + what);
    return cond;
  }
}
