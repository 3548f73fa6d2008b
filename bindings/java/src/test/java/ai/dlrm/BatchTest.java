package ai.dlrm;

import static ai.dlrm.TestData.B;
import static ai.dlrm.TestData.ND;
import static ai.dlrm.TestData.NF;
import static ai.dlrm.TestData.assertSameBits;
import static ai.dlrm.TestData.direct;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import ai.dlrm.internal.DlrmNative;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import org.junit.AfterClass;
import org.junit.BeforeClass;
import org.junit.Test;

/** Batches over arrays and over direct buffers: same results, no copies, checked shapes. */
public class BatchTest {
  private static Engine engine;

  @BeforeClass
  public static void trainModel() {
    engine = TestData.trainedEngine(10);
  }

  @AfterClass
  public static void closeModel() {
    engine.close();
  }

  @Test
  public void derivesShapeFromArrays() {
    Batch batch = TestData.batch(2);
    assertEquals(B, batch.batchSize());
    assertEquals(ND, batch.numDense());
    assertEquals(NF, batch.numSparse());
    assertEquals(new TestData.Columns(2).ids.length, batch.numIds());
    assertTrue(batch.hasLabels());
    assertFalse(batch.isDirect());
    assertTrue(new TestData.Columns(2).directBatch().isDirect());
  }

  @Test
  public void arraysAndDirectBuffersPredictIdentically() {
    for (int salt = 0; salt < 4; salt++) {
      TestData.Columns plain = new TestData.Columns(salt);
      assertSameBits("salt " + salt, engine.predict(plain.batch()),
          engine.predict(plain.directBatch()));
      TestData.Columns weighted = new TestData.Columns(salt).withWeights();
      assertSameBits("weighted, salt " + salt, engine.predict(weighted.batch()),
          engine.predict(weighted.directBatch()));
    }
  }

  @Test
  public void trainingOnDirectBuffersMatchesArrays() {
    try (Engine onArrays = Engine.create(TestData.CONFIG);
        Engine onBuffers = Engine.create(TestData.CONFIG)) {
      for (int step = 0; step < 5; step++) {
        TestData.Columns c = new TestData.Columns(step % 3).withWeights();
        float a = onArrays.trainStep(c.batch());
        float b = onBuffers.trainStep(c.directBatch());
        assertEquals("loss of step " + step, Float.floatToRawIntBits(a),
            Float.floatToRawIntBits(b));
      }
      assertSameBits("parameters after training", onArrays.predict(TestData.reference()),
          onBuffers.predict(TestData.reference()));
    }
  }

  /** Writes into the buffers after building the batch are what the engine sees: no copy. */
  @Test
  public void directBatchReadsTheBuffersInPlace() {
    TestData.Columns first = new TestData.Columns(1);
    ByteBuffer dense = direct(first.dense);
    Batch batch = Batch.directBuilder().dense(dense).labels(direct(first.labels))
        .lengths(direct(first.lengths)).ids(direct(first.ids)).build();
    float[] original = engine.predict(batch);
    assertSameBits("as built", engine.predict(first.batch()), original);

    float[] changed = first.dense.clone();
    for (int i = 0; i < changed.length; i++) {
      changed[i] = 1.0f - changed[i];
    }
    dense.asFloatBuffer().put(changed);
    float[] after = engine.predict(batch);
    TestData.Columns expected = new TestData.Columns(1);
    System.arraycopy(changed, 0, expected.dense, 0, changed.length);
    assertSameBits("sees the new dense values", engine.predict(expected.batch()), after);
    assertFalse(java.util.Arrays.equals(TestData.bits(original), TestData.bits(after)));
  }

  @Test
  public void directBufferContentStartsAtItsPosition() {
    TestData.Columns c = new TestData.Columns(3);
    ByteBuffer dense = ByteBuffer.allocateDirect(16 + c.dense.length * 4)
        .order(ByteOrder.nativeOrder());
    dense.position(16);
    dense.slice().order(ByteOrder.nativeOrder()).asFloatBuffer().put(c.dense);
    ByteBuffer ids = ByteBuffer.allocateDirect(8 * (c.ids.length + 4))
        .order(ByteOrder.nativeOrder());
    ids.position(8);
    ids.slice().order(ByteOrder.nativeOrder()).asLongBuffer().put(c.ids);
    ids.limit(8 + 8 * c.ids.length);
    Batch batch = Batch.directBuilder().dense(dense).labels(direct(c.labels))
        .lengths(direct(c.lengths)).ids(ids).build();
    assertEquals(c.ids.length, batch.numIds());
    assertSameBits("position..limit", engine.predict(c.batch()), engine.predict(batch));
  }

  @Test
  public void evaluateMixesArrayAndDirectBatches() {
    List<Batch> arrays = List.of(TestData.batch(0), TestData.batch(1), TestData.batch(2));
    List<Batch> mixed = List.of(TestData.batch(0), new TestData.Columns(1).directBatch(),
        TestData.batch(2));
    List<Batch> buffers = List.of(new TestData.Columns(0).directBatch(),
        new TestData.Columns(1).directBatch(), new TestData.Columns(2).directBatch());
    EvalResult expected = engine.evaluate(arrays);
    assertEquals(3 * B, expected.numSamples());
    assertEquals(expected, engine.evaluate(mixed));
    assertEquals(expected, engine.evaluate(buffers));
  }

  /** Many batches in one evaluate call: one pinned array per batch and column at once. */
  @Test
  public void evaluatesManyBatches() {
    List<Batch> arrays = new java.util.ArrayList<>();
    List<Batch> buffers = new java.util.ArrayList<>();
    for (int i = 0; i < 60; i++) {
      arrays.add(new TestData.Columns(i % 5).withWeights().batch());
      buffers.add(new TestData.Columns(i % 5).withWeights().directBatch());
    }
    EvalResult expected = engine.evaluate(arrays);
    assertEquals(60 * B, expected.numSamples());
    assertEquals(expected, engine.evaluate(buffers));
  }

  @Test
  public void builderRefusesSizesThatCannotDescribeABatch() {
    TestData.Columns c = new TestData.Columns(0);
    assertIllegal("dense", () -> Batch.builder().labels(c.labels).lengths(c.lengths).ids(c.ids));
    assertIllegal("lengths", () -> Batch.builder().dense(c.dense).labels(c.labels).ids(c.ids));
    assertIllegal("ids", () -> Batch.builder().dense(c.dense).labels(c.labels)
        .lengths(c.lengths));
    assertIllegal("dense", () -> Batch.builder().dense(new float[B * ND - 1]).labels(c.labels)
        .lengths(c.lengths).ids(c.ids));
    assertIllegal("lengths", () -> Batch.builder().dense(c.dense).labels(c.labels)
        .lengths(new int[NF * B + 1]).ids(c.ids));
    assertIllegal("weights", () -> Batch.builder().dense(c.dense).labels(c.labels)
        .lengths(c.lengths).ids(c.ids).weights(new float[c.ids.length + 1]));
    assertIllegal("labels", () -> Batch.builder().batchSize(B + 1).dense(c.dense)
        .labels(c.labels).lengths(c.lengths).ids(c.ids));
    assertIllegal("batchSize", () -> Batch.builder().dense(c.dense).lengths(c.lengths)
        .ids(c.ids));
    assertIllegal("batchSize", () -> Batch.builder().batchSize(0).dense(c.dense)
        .lengths(c.lengths).ids(c.ids));
  }

  @Test
  public void directBuilderRefusesHeapMisorderedAndMisalignedBuffers() {
    TestData.Columns c = new TestData.Columns(0);
    ByteBuffer heap = ByteBuffer.allocate(c.dense.length * 4).order(ByteOrder.nativeOrder());
    IllegalArgumentException e = assertIllegal("dense", () -> Batch.directBuilder().dense(heap)
        .labels(direct(c.labels)).lengths(direct(c.lengths)).ids(direct(c.ids)));
    assertTrue(e.getMessage(), e.getMessage().contains("direct"));

    ByteOrder other = ByteOrder.nativeOrder() == ByteOrder.LITTLE_ENDIAN
        ? ByteOrder.BIG_ENDIAN : ByteOrder.LITTLE_ENDIAN;
    ByteBuffer misordered = direct(c.labels).order(other);
    e = assertIllegal("labels", () -> Batch.directBuilder().dense(direct(c.dense))
        .labels(misordered).lengths(direct(c.lengths)).ids(direct(c.ids)));
    assertTrue(e.getMessage(), e.getMessage().contains("byte order"));

    ByteBuffer misaligned = ByteBuffer.allocateDirect(8 * c.ids.length + 4)
        .order(ByteOrder.nativeOrder());
    misaligned.position(4);
    assertIllegal("ids", () -> Batch.directBuilder().dense(direct(c.dense))
        .labels(direct(c.labels)).lengths(direct(c.lengths)).ids(misaligned));

    ByteBuffer ragged = ByteBuffer.allocateDirect(c.dense.length * 4 + 2)
        .order(ByteOrder.nativeOrder());
    assertIllegal("dense", () -> Batch.directBuilder().dense(ragged).labels(direct(c.labels))
        .lengths(direct(c.lengths)).ids(direct(c.ids)));
  }

  /** The SWIG typemap itself refuses heap buffers, whatever the Java layer did. */
  @Test
  public void nativeWrapperRefusesHeapBuffers() {
    NativeLoader.load();
    TestData.Columns c = new TestData.Columns(0);
    ByteBuffer heap = ByteBuffer.allocate(c.dense.length * 4);
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> DlrmNative.jdlrm_predict_buffers(null, B, ND, NF, heap, null,
            direct(c.lengths), direct(c.ids), c.ids.length, null, new float[B]));
    assertEquals("dense must be a direct ByteBuffer (ByteBuffer.allocateDirect)", e.getMessage());
  }

  private static IllegalArgumentException assertIllegal(String argument,
      java.util.function.Supplier<?> builder) {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> {
      Object b = builder.get();
      if (b instanceof Batch.ArrayBuilder a) {
        a.build();
      } else {
        ((Batch.DirectBuilder) b).build();
      }
    });
    assertTrue("'" + e.getMessage() + "' names " + argument,
        e.getMessage().contains(argument));
    return e;
  }
}
