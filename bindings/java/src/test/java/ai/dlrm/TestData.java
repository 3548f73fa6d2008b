package ai.dlrm;

import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/** The model and batches of the C ABI test (tests/c/capi_c99_test.c), in Java. */
final class TestData {
  static final int B = 8;
  static final int ND = 3;
  static final int NF = 2;

  /** The small model shared with the C ABI test and the Python and Go suites. */
  static final String CONFIG = readSharedModel();

  private TestData() {}

  private static String readSharedModel() {
    String path = System.getenv("DLRM_TEST_MODEL");
    if (path == null) throw new IllegalStateException("DLRM_TEST_MODEL is not set");
    try {
      return java.nio.file.Files.readString(java.nio.file.Path.of(path));
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  /** The columns of one batch as plain arrays, to be mutated by tests before building. */
  static final class Columns {
    final float[] dense = new float[B * ND];
    final float[] labels = new float[B];
    final int[] lengths = new int[NF * B];
    long[] ids;
    float[] weights;

    /** make_batch() of the C test: 0, 1 or 2 ids per bag, empty bags included. */
    Columns(int salt) {
      for (int i = 0; i < B * ND; i++) {
        dense[i] = (float) ((i * 7 + salt) % 11) / 11.0f;
      }
      for (int i = 0; i < B; i++) {
        labels[i] = (i + salt) % 2;
      }
      long[] buffer = new long[NF * B * 3];
      int n = 0;
      for (int i = 0; i < NF * B; i++) {
        int len = (i + salt) % 3;
        lengths[i] = len;
        for (int k = 0; k < len; k++) {
          buffer[n++] = (i * 5 + k * 3 + salt) % 20;
        }
      }
      ids = java.util.Arrays.copyOf(buffer, n);
    }

    Columns withWeights() {
      weights = new float[ids.length];
      for (int i = 0; i < weights.length; i++) {
        weights[i] = 0.5f + 0.25f * (i % 3);
      }
      return this;
    }

    Batch batch() {
      return Batch.builder().dense(dense).labels(labels).lengths(lengths).ids(ids)
          .weights(weights).build();
    }

    Batch directBatch() {
      return Batch.directBuilder().dense(direct(dense)).labels(direct(labels))
          .lengths(direct(lengths)).ids(direct(ids))
          .weights(weights == null ? null : direct(weights)).build();
    }
  }

  static Batch batch(int salt) {
    return new Columns(salt).batch();
  }

  /** The batch whose predictions stand for the engine's observable state. */
  static Batch reference() {
    return batch(1);
  }

  static ByteBuffer direct(float[] values) {
    ByteBuffer b = ByteBuffer.allocateDirect(values.length * 4).order(ByteOrder.nativeOrder());
    b.asFloatBuffer().put(values);
    return b;
  }

  static ByteBuffer direct(int[] values) {
    ByteBuffer b = ByteBuffer.allocateDirect(values.length * 4).order(ByteOrder.nativeOrder());
    b.asIntBuffer().put(values);
    return b;
  }

  static ByteBuffer direct(long[] values) {
    ByteBuffer b = ByteBuffer.allocateDirect(values.length * 8).order(ByteOrder.nativeOrder());
    b.asLongBuffer().put(values);
    return b;
  }

  static int[] bits(float[] values) {
    int[] bits = new int[values.length];
    for (int i = 0; i < values.length; i++) {
      bits[i] = Float.floatToRawIntBits(values[i]);
    }
    return bits;
  }

  /** Bitwise equality of floats (NaN-safe, -0 != +0). */
  static void assertSameBits(String message, float[] expected, float[] actual) {
    assertEquals(message + ": length", expected.length, actual.length);
    assertArrayEquals(message, bits(expected), bits(actual));
  }

  /** An engine trained for a few steps, so predictions depend on every parameter. */
  static Engine trainedEngine(int steps) {
    Engine engine = Engine.create(CONFIG);
    for (int step = 0; step < steps; step++) {
      engine.trainStep(batch(step % 3));
    }
    return engine;
  }
}
