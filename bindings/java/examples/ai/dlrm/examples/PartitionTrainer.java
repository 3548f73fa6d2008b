package ai.dlrm.examples;

import ai.dlrm.Batch;
import ai.dlrm.Engine;
import ai.dlrm.EvalResult;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import java.util.SplittableRandom;

/**
 * Trains an engine from an {@code Iterator<FeatureRow>} in fixed-size batches: the shape of a
 * Spark {@code mapPartitions} task, which receives its partition as an iterator of rows.
 *
 * <pre>{@code
 * rows.mapPartitions(partition -> {
 *   try (Engine engine = Engine.create(config)) {
 *     float[] losses = new PartitionTrainer(engine, 512, 13, 26).train(partition);
 *     engine.save(checkpointFor(TaskContext.getPartitionId()));
 *     return summarize(losses);
 *   }
 * });
 * }</pre>
 *
 * <p>Rows are copied once, into column arrays allocated up front; the {@link Batch} over them
 * is built once too and reused for every full batch, because a batch is a view of its arrays
 * and the engine reads them only during {@link Engine#trainStep}. So the loop allocates
 * nothing per row or per batch.
 */
public final class PartitionTrainer {
  /**
   * One training example.
   *
   * @param dense the dense features
   * @param categorical one id per sparse feature, in the config's feature order
   * @param label 1 for a click, 0 otherwise
   */
  public record FeatureRow(float[] dense, long[] categorical, float label) {}

  private final Engine engine;
  private final int batchSize;
  private final int numDense;
  private final int numSparse;
  private final float[] dense;
  private final float[] labels;
  private final int[] lengths;
  private final long[] ids;
  private final Batch fullBatch;

  /** A trainer filling batches of {@code batchSize} rows for a model of the given widths. */
  public PartitionTrainer(Engine engine, int batchSize, int numDense, int numSparse) {
    if (batchSize <= 0 || numDense <= 0 || numSparse <= 0) {
      throw new IllegalArgumentException("batchSize, numDense and numSparse must be positive");
    }
    this.engine = engine;
    this.batchSize = batchSize;
    this.numDense = numDense;
    this.numSparse = numSparse;
    this.dense = new float[batchSize * numDense];
    this.labels = new float[batchSize];
    this.lengths = new int[numSparse * batchSize];
    this.ids = new long[numSparse * batchSize];
    Arrays.fill(lengths, 1); // one id per feature and row
    this.fullBatch = Batch.builder().dense(dense).labels(labels).lengths(lengths).ids(ids).build();
  }

  /**
   * Trains on every row of the iterator, one step per {@code batchSize} rows (the last batch
   * may be smaller).
   *
   * @return the loss of each step
   */
  public float[] train(Iterator<FeatureRow> rows) {
    List<Float> losses = new ArrayList<>();
    int filled = 0;
    long seen = 0;
    while (rows.hasNext()) {
      put(filled, rows.next(), seen++);
      if (++filled == batchSize) {
        losses.add(engine.trainStep(fullBatch));
        filled = 0;
      }
    }
    if (filled > 0) {
      losses.add(engine.trainStep(partialBatch(filled)));
    }
    float[] result = new float[losses.size()];
    for (int i = 0; i < result.length; i++) {
      result[i] = losses.get(i);
    }
    return result;
  }

  /** Writes a row into slot {@code i}: dense row-major, ids feature-major. */
  private void put(int i, FeatureRow row, long rowNumber) {
    if (row.dense().length != numDense || row.categorical().length != numSparse) {
      throw new IllegalArgumentException("row " + rowNumber + " has " + row.dense().length
          + " dense and " + row.categorical().length + " categorical features; expected "
          + numDense + " and " + numSparse);
    }
    System.arraycopy(row.dense(), 0, dense, i * numDense, numDense);
    labels[i] = row.label();
    for (int f = 0; f < numSparse; f++) {
      ids[f * batchSize + i] = row.categorical()[f];
    }
  }

  /** The first n rows as a batch of their own (feature-major with stride n, not batchSize). */
  private Batch partialBatch(int n) {
    int[] partLengths = new int[numSparse * n];
    long[] partIds = new long[numSparse * n];
    Arrays.fill(partLengths, 1);
    for (int f = 0; f < numSparse; f++) {
      System.arraycopy(ids, f * batchSize, partIds, f * n, n);
    }
    return Batch.builder().dense(Arrays.copyOf(dense, n * numDense))
        .labels(Arrays.copyOf(labels, n)).lengths(partLengths).ids(partIds).build();
  }

  // ---- demo: synthetic rows ---------------------------------------------------------------

  private static final int NUM_DENSE = 4;
  private static final int NUM_SPARSE = 3;
  private static final int NUM_ROWS = 1000;

  private static final String CONFIG = String.join("\n",
      "model {",
      "  num_dense_features: " + NUM_DENSE,
      "  tables { name: 'users' num_rows: " + NUM_ROWS + " dim: 8 }",
      "  tables { name: 'items' num_rows: " + NUM_ROWS + " dim: 8 }",
      "  sparse_features { name: 'user' table: 'users' }",
      "  sparse_features { name: 'item' table: 'items' }",
      "  sparse_features { name: 'related_item' table: 'items' }",
      "  bottom_mlp { layer_sizes: 16 layer_sizes: 8 }",
      "  top_mlp { layer_sizes: 16 layer_sizes: 1 }",
      "}",
      "dense_optimizer { learning_rate: 0.01 adam {} }",
      "sparse_optimizer { learning_rate: 0.05 rowwise_adagrad {} }",
      "seed: 42 num_threads: 2",
      "");

  /** Rows whose click probability depends on two dense features and the item id. */
  static Iterator<FeatureRow> syntheticRows(long seed, int count) {
    SplittableRandom random = new SplittableRandom(seed);
    return new Iterator<>() {
      private int produced;

      @Override
      public boolean hasNext() {
        return produced < count;
      }

      @Override
      public FeatureRow next() {
        if (!hasNext()) {
          throw new NoSuchElementException();
        }
        produced++;
        float[] dense = new float[NUM_DENSE];
        for (int i = 0; i < NUM_DENSE; i++) {
          dense[i] = (float) random.nextDouble(-1, 1);
        }
        long user = random.nextInt(NUM_ROWS);
        long item = random.nextInt(NUM_ROWS);
        long related = (item + random.nextInt(5)) % NUM_ROWS;
        double logit = 2.0 * dense[0] - 1.5 * dense[1] + (item % 3 == 0 ? 1.5 : -0.5);
        float label = random.nextDouble() < 1 / (1 + Math.exp(-logit)) ? 1f : 0f;
        return new FeatureRow(dense, new long[] {user, item, related}, label);
      }
    };
  }

  /** Evaluation batch from rows (all in one batch). */
  static Batch batchOf(Iterator<FeatureRow> rows, int n) {
    float[] dense = new float[n * NUM_DENSE];
    float[] labels = new float[n];
    int[] lengths = new int[NUM_SPARSE * n];
    long[] ids = new long[NUM_SPARSE * n];
    Arrays.fill(lengths, 1);
    for (int i = 0; i < n; i++) {
      FeatureRow row = rows.next();
      System.arraycopy(row.dense(), 0, dense, i * NUM_DENSE, NUM_DENSE);
      labels[i] = row.label();
      for (int f = 0; f < NUM_SPARSE; f++) {
        ids[f * n + i] = row.categorical()[f];
      }
    }
    return Batch.builder().dense(dense).labels(labels).lengths(lengths).ids(ids).build();
  }

  /** Trains on 3 synthetic "partitions" and prints the loss; exits 1 if nothing was learned. */
  public static void main(String[] args) {
    int batchSize = 128;
    try (Engine engine = Engine.create(CONFIG)) {
      Batch holdout = batchOf(syntheticRows(999, 2000), 2000);
      EvalResult initial = engine.evaluate(List.of(holdout));
      PartitionTrainer trainer = new PartitionTrainer(engine, batchSize, NUM_DENSE, NUM_SPARSE);
      float firstLoss = Float.NaN;
      float lastLoss = Float.NaN;
      for (int partition = 0; partition < 3; partition++) {
        // 5000 rows: 39 full batches and one of 8 rows.
        float[] losses = trainer.train(syntheticRows(partition, 5000));
        double mean = 0;
        for (float loss : losses) {
          mean += loss;
        }
        mean /= losses.length;
        if (partition == 0) {
          firstLoss = losses[0];
        }
        lastLoss = losses[losses.length - 1];
        System.out.printf("partition %d: %d steps, mean loss %.4f, last loss %.4f%n",
            partition, losses.length, mean, lastLoss);
      }
      EvalResult result = engine.evaluate(List.of(holdout));
      System.out.printf("steps %d, first loss %.4f, last loss %.4f%n", engine.step(),
          firstLoss, lastLoss);
      System.out.printf("holdout: log loss %.4f -> %.4f, AUC %.4f -> %.4f%n",
          initial.logLoss(), result.logLoss(), initial.auc(), result.auc());
      if (!(result.logLoss() < initial.logLoss() && result.auc() > 0.7)) {
        System.err.println("the model did not learn the synthetic signal");
        System.exit(1);
      }
    }
  }
}
