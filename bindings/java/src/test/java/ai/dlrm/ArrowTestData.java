package ai.dlrm;

import static org.junit.Assume.assumeTrue;

/**
 * The Arrow record batch of src/test/native/arrow_arrays.c (a struct array built by hand to the
 * C Data Interface spec, in native memory), and the same samples as a hand-built {@link
 * Batch}. Columns: dense x (float32), y (float64), z (int32); label click (int64); sparse a
 * (list of int64, row 1 null) and b (large_list of int32); wa, the weights of a; and, for the
 * error tests, x_null (float32, row 2 null) and w_short (weights of a, row 4 one short).
 */
final class ArrowTestData {
  static final int ROWS = 6;
  /** x, y, z of each row, row-major. */
  static final float[] DENSE = {
    0.5f, 10.5f, 1, 1.5f, 11.25f, -2, -2.25f, -12, 3, 3, 0.75f, 0, 0.125f, 13.5f, 5, -1, 2, 7
  };
  static final float[] LABELS = {1, 0, 1, 1, 0, 0};
  /** Feature-major: a's bags (row 1 null, so empty), then b's. */
  static final int[] LENGTHS = {2, 0, 1, 0, 3, 1, 1, 2, 0, 1, 1, 3};
  static final long[] IDS = {3, 7, 49, 0, 1, 2, 10, 4, 19, 0, 5, 6, 7, 8, 9};
  /** wa for a's ids, then 1 for b's (unweighted). */
  static final float[] WEIGHTS = {0.5f, 2, 1.5f, 0.25f, 1, 4, 3, 1, 1, 1, 1, 1, 1, 1, 1};

  private ArrowTestData() {}

  /** {schema address, array address} of a new table. */
  private static native long[] create();

  /** Calls the release callback of each root still unreleased. */
  private static native void release(long schemaAddress, long arrayAddress);

  /** Whether neither root has been released. */
  private static native boolean live(long schemaAddress, long arrayAddress);

  /** Number of tables whose memory is not yet freed. */
  static native int tables();

  /** Loads libdlrm, then the tests' JNI library (whose libdlrm must be that one). */
  static void load() {
    String library = System.getProperty("dlrm.test.nativeLib");
    assumeTrue("needs -Ddlrm.test.nativeLib (ctest java_tests sets it)", library != null);
    NativeLoader.load();
    System.load(library);
  }

  /** One exported table, as a host holds it; close() releases it, as the host must. */
  static final class Table implements AutoCloseable {
    final long schema;
    final long array;

    Table() {
      long[] addresses = create();
      schema = addresses[0];
      array = addresses[1];
    }

    boolean live() {
      return ArrowTestData.live(schema, array);
    }

    Batch batch(ArrowColumns columns) {
      return Batch.fromArrow(schema, array, columns);
    }

    @Override
    public void close() {
      release(schema, array);
    }
  }

  /** The mapping of the model's features: label click, dense x y z, sparse a b. */
  static ArrowColumns.Builder columns() {
    return ArrowColumns.builder().label("click").dense("x", "y", "z").sparse("a", "b");
  }

  /** The same samples over Java arrays. */
  static Batch handBuilt(boolean labels, boolean weights) {
    return Batch.builder().batchSize(ROWS).dense(DENSE).labels(labels ? LABELS : null)
        .lengths(LENGTHS).ids(IDS).weights(weights ? WEIGHTS : null).build();
  }
}
