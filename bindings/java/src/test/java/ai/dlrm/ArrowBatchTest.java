package ai.dlrm;

import static ai.dlrm.ArrowTestData.ROWS;
import static ai.dlrm.ArrowTestData.columns;
import static ai.dlrm.ArrowTestData.handBuilt;
import static ai.dlrm.TestData.CONFIG;
import static ai.dlrm.TestData.assertSameBits;
import static ai.dlrm.TestData.reference;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertNotNull;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.util.Arrays;
import java.util.List;
import org.junit.After;
import org.junit.Before;
import org.junit.BeforeClass;
import org.junit.Test;
import org.junit.function.ThrowingRunnable;

/**
 * Batch.fromArrow over a record batch exported through the Arrow C Data Interface (built in
 * native memory by src/test/native/arrow_arrays.c): the batch trains, predicts and evaluates
 * bitwise as the same samples built by hand; the Arrow arrays are borrowed, never released;
 * errors name the column (and the row); failed calls leave an engine unchanged.
 */
public class ArrowBatchTest {
  private ArrowTestData.Table table;
  private int tablesBefore;

  @BeforeClass
  public static void loadTestLibrary() {
    ArrowTestData.load();
  }

  @Before
  public void export() {
    tablesBefore = ArrowTestData.tables();
    table = new ArrowTestData.Table();
  }

  @After
  public void release() {
    assertTrue("the binding released the borrowed Arrow arrays", table.live());
    table.close();
    assertEquals("tables left after release", tablesBefore, ArrowTestData.tables());
  }

  private static DlrmException assertFails(StatusCode code, ThrowingRunnable call,
      String... needles) {
    DlrmException e = assertThrows(DlrmException.class, call);
    assertEquals(e.toString(), code, e.code());
    for (String needle : needles) {
      assertTrue("'" + e.getMessage() + "' contains '" + needle + "'",
          e.getMessage().contains(needle));
    }
    return e;
  }

  private static <T extends Throwable> void assertNames(Class<T> type, String needle,
      ThrowingRunnable call) {
    T e = assertThrows(type, call);
    assertTrue("'" + e.getMessage() + "' contains '" + needle + "'",
        e.getMessage().contains(needle));
  }

  private static void assertSameParameters(Engine expected, Engine actual) {
    assertEquals(expected.parameterNames(), actual.parameterNames());
    for (String name : expected.parameterNames()) {
      assertSameBits(name, expected.readParameter(name), actual.readParameter(name));
    }
  }

  @Test
  public void copiesTheColumnsIntoADirectBatch() {
    Batch batch = table.batch(columns().build());
    assertEquals(ROWS, batch.batchSize());
    assertEquals(3, batch.numDense());
    assertEquals(2, batch.numSparse());
    assertEquals(ArrowTestData.IDS.length, batch.numIds());
    assertTrue(batch.hasLabels());
    assertTrue(batch.isDirect());
    Batch.DirectColumns d = batch.buffers();
    assertNull("unweighted", d.weights);
    float[] dense = new float[ArrowTestData.DENSE.length];
    d.dense.asFloatBuffer().get(dense);
    assertSameBits("dense", ArrowTestData.DENSE, dense);
    int[] lengths = new int[ArrowTestData.LENGTHS.length];
    d.lengths.asIntBuffer().get(lengths);
    assertEquals(Arrays.toString(ArrowTestData.LENGTHS), Arrays.toString(lengths));
    long[] ids = new long[ArrowTestData.IDS.length];
    d.ids.asLongBuffer().get(ids);
    assertEquals(Arrays.toString(ArrowTestData.IDS), Arrays.toString(ids));
  }

  @Test
  public void trainsBitwiseAsTheHandBuiltBatch() {
    Batch plain = table.batch(columns().build());
    Batch weighted = table.batch(columns().weights("wa", null).build());
    assertNotNull(weighted.buffers().weights);
    try (Engine fromArrow = Engine.create(CONFIG); Engine byHand = Engine.create(CONFIG)) {
      float[] expected = new float[6];
      float[] losses = new float[6];
      for (int step = 0; step < 6; step++) {
        boolean w = step % 2 == 1;
        expected[step] = byHand.trainStep(handBuilt(true, w));
        losses[step] = fromArrow.trainStep(w ? weighted : plain);
      }
      assertSameBits("losses", expected, losses);
      assertSameParameters(byHand, fromArrow);
      assertSameBits("predictions", byHand.predict(handBuilt(true, true)),
          fromArrow.predict(weighted));
      EvalResult want = byHand.evaluate(List.of(handBuilt(true, false), reference()));
      EvalResult got = fromArrow.evaluate(List.of(plain, reference())); // mixed: arrays copied
      assertEquals(Double.doubleToRawLongBits(want.logLoss()),
          Double.doubleToRawLongBits(got.logLoss()));
      assertEquals(Double.doubleToRawLongBits(want.auc()), Double.doubleToRawLongBits(got.auc()));
    }
  }

  @Test
  public void predictsWithoutALabelColumn() {
    Batch batch = table.batch(columns().label(null).build());
    assertFalse(batch.hasLabels());
    try (Engine engine = TestData.trainedEngine(3)) {
      assertSameBits("predictions", engine.predict(handBuilt(false, false)),
          engine.predict(batch));
      assertFails(StatusCode.INVALID_ARGUMENT, () -> engine.trainStep(batch), "labels");
    }
  }

  @Test
  public void theBatchOutlivesTheArrowArrays() {
    Batch batch;
    try (ArrowTestData.Table other = new ArrowTestData.Table()) {
      batch = other.batch(columns().build());
      assertTrue("borrowed, not released", other.live());
    }
    try (Engine copy = Engine.create(CONFIG); Engine byHand = Engine.create(CONFIG)) {
      assertSameBits("loss after the release",
          new float[] {byHand.trainStep(handBuilt(true, false))},
          new float[] {copy.trainStep(batch)});
    }
  }

  @Test
  public void errorsNameTheColumnAndRow() {
    ArrowColumns missing = columns().dense("x", "nope", "z").build();
    assertFails(StatusCode.INVALID_ARGUMENT, () -> table.batch(missing), "\"nope\"",
        "not a column");
    ArrowColumns listAsDense = columns().dense("x", "y", "a").build();
    assertFails(StatusCode.INVALID_ARGUMENT, () -> table.batch(listAsDense), "\"a\"", "+l");
    ArrowColumns numbersAsIds = columns().sparse("a", "x").build();
    assertFails(StatusCode.INVALID_ARGUMENT, () -> table.batch(numbersAsIds), "\"x\"", "list");
    ArrowColumns nullValue = columns().dense("x", "y", "x_null").build();
    assertFails(StatusCode.INVALID_ARGUMENT, () -> table.batch(nullValue), "\"x_null\"",
        "row 2", "null");
    ArrowColumns shortWeights = columns().weights("w_short", null).build();
    assertFails(StatusCode.INVALID_ARGUMENT, () -> table.batch(shortWeights), "\"w_short\"",
        "row 4");
  }

  @Test
  public void javaArgumentsAreCheckedByName() {
    ArrowColumns ok = columns().build();
    assertNames(IllegalArgumentException.class, "schemaAddress",
        () -> Batch.fromArrow(0, table.array, ok));
    assertNames(IllegalArgumentException.class, "arrayAddress",
        () -> Batch.fromArrow(table.schema, 0, ok));
    assertNames(NullPointerException.class, "columns",
        () -> Batch.fromArrow(table.schema, table.array, null));
    assertNames(NullPointerException.class, "dense[1]",
        () -> columns().dense("x", null, "z").build());
    assertNames(NullPointerException.class, "sparse", () -> columns().sparse((String[]) null));
    assertNames(IllegalArgumentException.class, "label", () -> columns().label("").build());
    assertNames(IllegalArgumentException.class, "sparse[0]",
        () -> columns().sparse("a\0b", "b").build());
    assertNames(IllegalArgumentException.class, "weights",
        () -> columns().weights("wa").build());
  }

  @Test
  public void columnsAreImmutable() {
    String[] dense = {"x", "y", "z"};
    ArrowColumns c = columns().dense(dense).weights("wa", null).build();
    dense[0] = "changed";
    assertEquals(List.of("x", "y", "z"), c.dense());
    assertEquals("click", c.label());
    assertEquals(Arrays.asList("wa", null), c.weights());
    assertNull(columns().build().weights());
    assertThrows(UnsupportedOperationException.class, () -> c.sparse().add("c"));
    assertEquals(c, columns().weights("wa", null).build());
    assertEquals(c.hashCode(), columns().weights("wa", null).build().hashCode());
  }

  @Test
  public void failedCallsLeaveTheEngineUnchanged() {
    try (Engine engine = TestData.trainedEngine(3)) {
      float[] before = engine.predict(reference());
      long stepBefore = engine.step();
      assertFails(StatusCode.INVALID_ARGUMENT,
          () -> table.batch(columns().sparse("a", "nope").build()), "\"nope\"");
      // Arrow batches the engine refuses: 2 dense features for a model of 3, and a's ids
      // (up to 49) looked up in b's table of 20 rows.
      Batch twoDense = table.batch(columns().dense("x", "y").build());
      assertFails(StatusCode.INVALID_ARGUMENT, () -> engine.trainStep(twoDense), "num_dense");
      Batch swapped = table.batch(columns().sparse("b", "a").build());
      assertFails(StatusCode.OUT_OF_RANGE, () -> engine.trainStep(swapped), "ids");
      assertSameBits("predictions after the failures", before, engine.predict(reference()));
      assertEquals(stepBefore, engine.step());
    }
  }
}
