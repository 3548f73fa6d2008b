package ai.dlrm;

import static ai.dlrm.TestData.B;
import static ai.dlrm.TestData.CONFIG;
import static ai.dlrm.TestData.assertSameBits;
import static ai.dlrm.TestData.batch;
import static ai.dlrm.TestData.reference;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import org.junit.Rule;
import org.junit.Test;
import org.junit.rules.TemporaryFolder;

/** Create, train, predict, evaluate, checkpoints and the engine's lifecycle. */
public class EngineTest {
  @Rule public TemporaryFolder tmp = new TemporaryFolder();

  @Test
  public void trainsPredictsAndEvaluates() {
    try (Engine engine = Engine.create(CONFIG)) {
      float[] before = engine.predict(reference());
      float first = 0;
      float loss = 0;
      for (int step = 0; step < 30; step++) {
        loss = engine.trainStep(batch(step % 3));
        if (step == 0) {
          first = loss;
        }
        assertTrue("finite positive loss " + loss, Float.isFinite(loss) && loss > 0);
      }
      assertTrue("it learns the fixed batches: " + first + " -> " + loss, loss < first);
      assertEquals(30, engine.step());
      float[] after = engine.predict(reference());
      assertFalse(Arrays.equals(TestData.bits(before), TestData.bits(after)));
      for (float p : after) {
        assertTrue("probability " + p, p >= 0 && p <= 1);
      }

      EvalResult result = engine.evaluate(List.of(reference(), batch(2)));
      assertEquals(2 * B, result.numSamples());
      assertTrue(result.auc() >= 0 && result.auc() <= 1);
      assertTrue(result.logLoss() > 0);

      engine.setLearningRate(0.01f);
      engine.setLearningRate(LearningRateTarget.SPARSE, 0.05f);
      assertTrue(engine.config().contains("num_dense_features: 3"));
    }
  }

  @Test
  public void predictsIntoCallerArray() {
    try (Engine engine = TestData.trainedEngine(5)) {
      float[] out = new float[B + 3];
      Arrays.fill(out, -7f);
      engine.predict(reference(), out);
      assertSameBits("prefix", engine.predict(reference()), Arrays.copyOf(out, B));
      for (int i = B; i < out.length; i++) {
        assertEquals("beyond the batch untouched", -7f, out[i], 0f);
      }
    }
  }

  @Test
  public void predictionIgnoresLabels() {
    try (Engine engine = TestData.trainedEngine(3)) {
      TestData.Columns c = new TestData.Columns(1);
      Batch unlabelled = Batch.builder().batchSize(B).dense(c.dense).lengths(c.lengths)
          .ids(c.ids).build();
      assertFalse(unlabelled.hasLabels());
      assertSameBits("labels do not matter", engine.predict(reference()),
          engine.predict(unlabelled));
    }
  }

  @Test
  public void savesLoadsAndRestoresFromCheckpoint() {
    Path checkpoint = tmp.getRoot().toPath().resolve("engine.ckpt");
    try (Engine engine = TestData.trainedEngine(10)) {
      engine.save(checkpoint);
      float[] saved = engine.predict(reference());
      try (Engine restored = Engine.fromCheckpoint(checkpoint)) {
        assertEquals(10, restored.step());
        assertSameBits("restored predictions", saved, restored.predict(reference()));
        // Same state, same next step: bitwise equal losses and predictions.
        float a = engine.trainStep(batch(2));
        float b = restored.trainStep(batch(2));
        assertEquals(Float.floatToRawIntBits(a), Float.floatToRawIntBits(b));
        assertSameBits("after one more step", engine.predict(reference()),
            restored.predict(reference()));
      }
      assertEquals("one step past the checkpoint", 11, engine.step());
      engine.load(checkpoint);
      assertEquals(10, engine.step());
      assertSameBits("rolled back", saved, engine.predict(reference()));
    }
  }

  @Test
  public void restoresFromCheckpointOnCpu() {
    Path checkpoint = tmp.getRoot().toPath().resolve("engine.ckpt");
    try (Engine engine = TestData.trainedEngine(10)) {
      engine.save(checkpoint);
      float[] saved = engine.predict(reference());
      try (Engine onCpu = Engine.fromCheckpoint(checkpoint, "cpu");
          Engine own = Engine.fromCheckpoint(checkpoint, null)) {
        assertEquals(10, onCpu.step());
        assertSameBits("restored on cpu", saved, onCpu.predict(reference()));
        assertSameBits("restored on its own device", saved, own.predict(reference()));
      }
    }
  }

  @Test
  public void createsFromConfigFile() throws Exception {
    Path config = tmp.getRoot().toPath().resolve("config.pbtxt");
    Files.write(config, CONFIG.getBytes(StandardCharsets.UTF_8));
    try (Engine fromFile = Engine.fromFile(config);
        Engine fromText = Engine.create(CONFIG)) {
      // Same config and seed: bitwise the same initial model.
      assertSameBits("same init", fromText.predict(reference()), fromFile.predict(reference()));
    }
  }

  @Test
  public void closeIsIdempotentAndLaterCallsThrow() {
    Engine engine = Engine.create(CONFIG);
    assertFalse(engine.isClosed());
    engine.close();
    engine.close();
    assertTrue(engine.isClosed());
    Batch batch = reference();
    Path path = tmp.getRoot().toPath().resolve("x.ckpt");
    List<Runnable> calls = List.of(
        () -> engine.trainStep(batch),
        () -> engine.predict(batch),
        () -> engine.predict(batch, new float[B]),
        () -> engine.evaluate(List.of(batch)),
        () -> engine.setLearningRate(0.1f),
        () -> engine.step(),
        () -> engine.config(),
        () -> engine.save(path),
        () -> engine.export(path, ExportPrecision.INT8),
        () -> engine.load(path),
        () -> engine.parameterNames(),
        () -> engine.parameterShape("bottom_mlp.0.weight"),
        () -> engine.readParameter("bottom_mlp.0.weight"),
        () -> engine.writeParameter("bottom_mlp.0.bias", new float[8]));
    for (Runnable call : calls) {
      IllegalStateException e = assertThrows(IllegalStateException.class, call::run);
      assertTrue(e.getMessage(), e.getMessage().contains("closed"));
    }
    assertFalse("nothing written by a closed engine", Files.exists(path));
  }

  @Test
  public void forgottenEngineIsReleasedByCleaner() throws Exception {
    long before = Engine.releasedByCleaner();
    createAndForget();
    long deadline = System.nanoTime() + 20_000_000_000L;
    while (Engine.releasedByCleaner() == before && System.nanoTime() < deadline) {
      System.gc();
      Thread.sleep(20);
      byte[][] pressure = new byte[64][];
      for (int i = 0; i < pressure.length; i++) {
        pressure[i] = new byte[1 << 16];
      }
    }
    assertTrue("the Cleaner destroyed the unclosed engine",
        Engine.releasedByCleaner() > before);
  }

  private static void createAndForget() {
    Engine engine = Engine.create(CONFIG);
    engine.predict(reference());
  }

  @Test
  public void closedEnginesAreNotCountedAsForgotten() {
    long before = Engine.releasedByCleaner();
    Engine.create(CONFIG).close();
    assertEquals(before, Engine.releasedByCleaner());
  }

  @Test
  public void versionAndStatusCodesMatchTheLibrary() {
    NativeLoader.load();
    assertFalse(NativeLoader.libraryVersion().isEmpty());
    assertEquals(1, NativeLoader.ABI_VERSION);
    for (StatusCode code : StatusCode.values()) {
      if (code != StatusCode.UNKNOWN) {
        assertEquals(code.name(), ai.dlrm.internal.DlrmNative.dlrm_status_name(code.code()));
        assertEquals(code, StatusCode.of(code.code()));
      }
    }
    assertEquals(StatusCode.UNKNOWN, StatusCode.of(12345));
  }
}
