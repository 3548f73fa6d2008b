package ai.dlrm;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.fail;
import static org.junit.Assume.assumeTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.Test;

/**
 * Cross-language check: the Python suite trains a model and exports, into
 * $DLRM_CROSSLANG_DIR, a checkpoint, a batch (raw little-endian arrays) and its predictions.
 * Java must predict bitwise the same floats from the same checkpoint, and writes its own
 * output to java.f32 for the other languages to compare.
 */
public class CrossLanguageTest {
  @Test
  public void predictsBitwiseWhatPythonPredicted() throws IOException {
    String dirName = System.getenv("DLRM_CROSSLANG_DIR");
    assumeTrue("DLRM_CROSSLANG_DIR is not set", dirName != null && !dirName.isEmpty());
    Path dir = Path.of(dirName);
    if (!Files.exists(dir.resolve("model.ckpt"))) {
      // JUnitCore does not report skipped tests; say it, so a missing fixture is visible.
      System.err.println("CrossLanguageTest skipped: no model.ckpt in " + dir
          + " (written by the Python suite's python_crosslang_export)");
    }
    assumeTrue(Files.exists(dir.resolve("model.ckpt")));

    String[] meta = Files.readString(dir.resolve("batch_meta.txt"), StandardCharsets.US_ASCII)
        .trim().split("\\s+");
    int batchSize = Integer.parseInt(meta[0]);
    int numDense = Integer.parseInt(meta[1]);
    int numSparse = Integer.parseInt(meta[2]);
    int numIds = Integer.parseInt(meta[3]);

    float[] dense = floats(dir.resolve("dense.f32"), batchSize * numDense);
    int[] lengths = ints(dir.resolve("lengths.i32"), numSparse * batchSize);
    long[] ids = longs(dir.resolve("ids.i64"), numIds);
    float[] weights = floats(dir.resolve("weights.f32"), numIds);
    float[] expected = floats(dir.resolve("expected.f32"), batchSize);

    float[] actual;
    try (Engine engine = Engine.fromCheckpoint(dir.resolve("model.ckpt"))) {
      Batch batch = Batch.builder().batchSize(batchSize).dense(dense).lengths(lengths).ids(ids)
          .weights(weights).build();
      assertEquals(numDense, batch.numDense());
      assertEquals(numSparse, batch.numSparse());
      actual = engine.predict(batch);
    }
    ByteBuffer out = ByteBuffer.allocate(4 * actual.length).order(ByteOrder.LITTLE_ENDIAN);
    out.asFloatBuffer().put(actual);
    Files.write(dir.resolve("java.f32"), out.array());

    for (int i = 0; i < batchSize; i++) {
      if (Float.floatToRawIntBits(expected[i]) != Float.floatToRawIntBits(actual[i])) {
        fail("sample " + i + ": Java predicted " + actual[i] + " (0x"
            + Integer.toHexString(Float.floatToRawIntBits(actual[i])) + "), Python "
            + expected[i] + " (0x" + Integer.toHexString(Float.floatToRawIntBits(expected[i]))
            + ")");
      }
    }
  }

  private static ByteBuffer read(Path file, int count, int elementSize) throws IOException {
    byte[] bytes = Files.readAllBytes(file);
    assertEquals(file + ": size", (long) count * elementSize, bytes.length);
    return ByteBuffer.wrap(bytes).order(ByteOrder.LITTLE_ENDIAN);
  }

  private static float[] floats(Path file, int count) throws IOException {
    float[] values = new float[count];
    read(file, count, 4).asFloatBuffer().get(values);
    return values;
  }

  private static int[] ints(Path file, int count) throws IOException {
    int[] values = new int[count];
    read(file, count, 4).asIntBuffer().get(values);
    return values;
  }

  private static long[] longs(Path file, int count) throws IOException {
    long[] values = new long[count];
    read(file, count, 8).asLongBuffer().get(values);
    return values;
  }
}
