package ai.dlrm;

import static ai.dlrm.TestData.B;
import static ai.dlrm.TestData.CONFIG;
import static ai.dlrm.TestData.ND;
import static ai.dlrm.TestData.assertSameBits;
import static ai.dlrm.TestData.reference;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import org.junit.After;
import org.junit.Before;
import org.junit.Rule;
import org.junit.Test;
import org.junit.function.ThrowingRunnable;
import org.junit.rules.TemporaryFolder;

/**
 * Every bad input raises its natural exception, with the engine's status code and a message
 * naming the problem, and leaves the engine exactly as it was (predictions bitwise equal,
 * same step).
 */
public class BadInputTest {
  @Rule public TemporaryFolder tmp = new TemporaryFolder();

  private Engine engine;
  private float[] before;
  private long stepBefore;

  @Before
  public void setUp() {
    engine = TestData.trainedEngine(5);
    before = engine.predict(reference());
    stepBefore = engine.step();
  }

  @After
  public void unchanged() {
    assertSameBits("predictions after the failures", before, engine.predict(reference()));
    assertEquals(stepBefore, engine.step());
    engine.close();
  }

  private static DlrmException assertFails(StatusCode code, String needle, ThrowingRunnable call) {
    DlrmException e = assertThrows(DlrmException.class, call);
    assertEquals(e.toString(), code, e.code());
    assertEquals(code.code(), e.rawCode());
    assertTrue("'" + e.getMessage() + "' contains '" + needle + "'",
        e.getMessage().contains(needle));
    assertTrue(e.toString(), e.toString().contains(code.name()));
    return e;
  }

  private static IllegalArgumentException assertIllegal(String needle, ThrowingRunnable call) {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, call);
    assertTrue("'" + e.getMessage() + "' contains '" + needle + "'",
        e.getMessage().contains(needle));
    return e;
  }

  @Test
  public void wrongArrayLengths() {
    TestData.Columns c = new TestData.Columns(3);
    // Java can tell these from the array lengths alone.
    assertIllegal("dense", () -> engine.trainStep(Batch.builder().dense(new float[B * ND + 1])
        .labels(c.labels).lengths(c.lengths).ids(c.ids).build()));
    assertIllegal("weights", () -> engine.trainStep(Batch.builder().dense(c.dense)
        .labels(c.labels).lengths(c.lengths).ids(c.ids).weights(new float[1]).build()));
    assertIllegal("out", () -> engine.predict(reference(), new float[B - 1]));
    // Only the engine knows the model: 4 dense features or 1 sparse feature per sample.
    assertFails(StatusCode.INVALID_ARGUMENT, "num_dense", () -> engine.trainStep(
        Batch.builder().dense(new float[B * (ND + 1)]).labels(c.labels).lengths(c.lengths)
            .ids(c.ids).build()));
    assertFails(StatusCode.INVALID_ARGUMENT, "num_sparse", () -> engine.trainStep(
        Batch.builder().dense(c.dense).labels(c.labels).lengths(Arrays.copyOf(c.lengths, B))
            .ids(c.ids).build()));
    // One id more than the lengths add up to.
    long[] extra = Arrays.copyOf(c.ids, c.ids.length + 1);
    assertFails(StatusCode.INVALID_ARGUMENT, "num_ids", () -> engine.trainStep(
        Batch.builder().dense(c.dense).labels(c.labels).lengths(c.lengths).ids(extra).build()));
  }

  @Test
  public void negativeLength() {
    TestData.Columns c = new TestData.Columns(3);
    c.lengths[5] = -1;
    assertFails(StatusCode.INVALID_ARGUMENT, "negative", () -> engine.trainStep(c.batch()));
  }

  @Test
  public void idsOutOfRange() {
    TestData.Columns c = new TestData.Columns(3);
    c.ids[0] = 50; // feature 0's table has 50 rows
    assertFails(StatusCode.OUT_OF_RANGE, "batch.ids", () -> engine.trainStep(c.batch()));
    assertFails(StatusCode.OUT_OF_RANGE, "batch.ids[0]", () -> engine.predict(c.batch()));
    assertFails(StatusCode.OUT_OF_RANGE, "batch.ids", () -> engine.predict(c.directBatch()));
    c.ids[0] = -3;
    assertFails(StatusCode.OUT_OF_RANGE, "-3", () -> engine.trainStep(c.batch()));
  }

  @Test
  public void nanAndOutOfRangeLabels() {
    TestData.Columns c = new TestData.Columns(3);
    c.labels[2] = Float.NaN;
    assertFails(StatusCode.INVALID_ARGUMENT, "batch.labels[2]", () -> engine.trainStep(c.batch()));
    c.labels[2] = 2.0f;
    assertFails(StatusCode.INVALID_ARGUMENT, "batch.labels[2]",
        () -> engine.trainStep(c.directBatch()));
    c.labels[2] = 1.0f;
    c.labels[5] = Float.NaN;
    assertFails(StatusCode.INVALID_ARGUMENT, "batches[0]",
        () -> engine.evaluate(List.of(c.batch())));
  }

  @Test
  public void nonFiniteDense() {
    TestData.Columns c = new TestData.Columns(3);
    c.dense[4] = Float.NaN;
    assertFails(StatusCode.INVALID_ARGUMENT, "batch.dense[1][1]", () -> engine.trainStep(c.batch()));
    c.dense[4] = 0;
    c.dense[0] = Float.POSITIVE_INFINITY;
    assertFails(StatusCode.INVALID_ARGUMENT, "batch.dense[0]", () -> engine.predict(c.batch()));
  }

  @Test
  public void trainingNeedsLabels() {
    TestData.Columns c = new TestData.Columns(3);
    Batch unlabelled = Batch.builder().batchSize(B).dense(c.dense).lengths(c.lengths)
        .ids(c.ids).build();
    assertFails(StatusCode.INVALID_ARGUMENT, "labels", () -> engine.trainStep(unlabelled));
  }

  @Test
  public void failedPredictLeavesTheOutputArrayAlone() {
    TestData.Columns c = new TestData.Columns(3);
    c.ids[0] = 50;
    float[] out = new float[B];
    Arrays.fill(out, 42f);
    assertFails(StatusCode.OUT_OF_RANGE, "batch.ids", () -> engine.predict(c.batch(), out));
    for (float v : out) {
      assertEquals(42f, v, 0f);
    }
  }

  @Test
  public void badEvaluateAndLearningRate() {
    assertFails(StatusCode.INVALID_ARGUMENT, "at least one batch",
        () -> engine.evaluate(List.of()));
    assertFails(StatusCode.INVALID_ARGUMENT, "learning rate",
        () -> engine.setLearningRate(-1.0f));
    assertFails(StatusCode.INVALID_ARGUMENT, "learning rate",
        () -> engine.setLearningRate(LearningRateTarget.DENSE, Float.NaN));
  }

  @Test
  public void unparsableAndInvalidConfigs() {
    assertFails(StatusCode.INVALID_ARGUMENT, "bogus_field",
        () -> Engine.create("model { bogus_field: 1 }"));
    assertFails(StatusCode.INVALID_ARGUMENT, "model.num_dense_features",
        () -> Engine.create("model { num_dense_features: 0 }"));
    assertIllegal("configText", () -> Engine.create("model {\0}"));
    assertFails(StatusCode.IO, "/nonexistent/dir/cfg.txt",
        () -> Engine.fromFile(Path.of("/nonexistent/dir/cfg.txt")));
  }

  @Test
  public void missingAndDamagedCheckpoints() throws Exception {
    Path missing = tmp.getRoot().toPath().resolve("missing.ckpt");
    assertFails(StatusCode.IO, "missing.ckpt", () -> Engine.fromCheckpoint(missing));
    assertFails(StatusCode.IO, "missing.ckpt", () -> engine.load(missing));
    assertFails(StatusCode.IO, "/nonexistent/dir",
        () -> engine.save(Path.of("/nonexistent/dir/engine.ckpt")));

    Path good = tmp.getRoot().toPath().resolve("good.ckpt");
    engine.save(good);
    byte[] bytes = Files.readAllBytes(good);
    Path truncated = tmp.getRoot().toPath().resolve("truncated.ckpt");
    Files.write(truncated, Arrays.copyOf(bytes, bytes.length / 2));
    assertFails(StatusCode.DATA_LOSS, "truncated.ckpt", () -> engine.load(truncated));
    bytes[bytes.length / 2] ^= 0x5a;
    Path corrupted = tmp.getRoot().toPath().resolve("corrupted.ckpt");
    Files.write(corrupted, bytes);
    assertFails(StatusCode.DATA_LOSS, "corrupted.ckpt", () -> engine.load(corrupted));
    assertFails(StatusCode.DATA_LOSS, "checksum", () -> Engine.fromCheckpoint(corrupted));
  }

  @Test
  public void unknownCheckpointDevice() {
    Path checkpoint = tmp.getRoot().toPath().resolve("engine.ckpt");
    engine.save(checkpoint);
    assertFails(StatusCode.INVALID_ARGUMENT, "'gpu'",
        () -> Engine.fromCheckpoint(checkpoint, "gpu"));
    assertIllegal("device", () -> Engine.fromCheckpoint(checkpoint, "cpu\0"));
  }

  @Test
  public void nonDirectByteBuffer() {
    TestData.Columns c = new TestData.Columns(3);
    ByteBuffer heap = ByteBuffer.allocate(4 * c.dense.length);
    assertIllegal("direct", () -> Batch.directBuilder().dense(heap)
        .labels(TestData.direct(c.labels)).lengths(TestData.direct(c.lengths))
        .ids(TestData.direct(c.ids)).build());
  }

  @Test
  public void closedEngine() {
    Engine other = Engine.create(CONFIG);
    other.close();
    assertThrows(IllegalStateException.class, () -> other.predict(reference()));
  }

  @Test
  public void badParameterAccess() {
    assertFails(StatusCode.NOT_FOUND, "nope", () -> engine.parameterShape("nope"));
    assertFails(StatusCode.NOT_FOUND, "no.such", () -> engine.readParameter("no.such"));
    assertFails(StatusCode.NOT_FOUND, "no.such",
        () -> engine.writeParameter("no.such", new float[4]));
    float[] values = engine.readParameter("embedding.t0.weight");
    assertFails(StatusCode.INVALID_ARGUMENT, "199 were given",
        () -> engine.writeParameter("embedding.t0.weight", Arrays.copyOf(values, 199)));
    values[17] = Float.NaN;
    assertFails(StatusCode.INVALID_ARGUMENT, "values[17]",
        () -> engine.writeParameter("embedding.t0.weight", values));
  }
}
