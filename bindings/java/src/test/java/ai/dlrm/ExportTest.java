package ai.dlrm;

import static ai.dlrm.TestData.assertSameBits;
import static ai.dlrm.TestData.batch;
import static ai.dlrm.TestData.bits;
import static ai.dlrm.TestData.reference;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import org.junit.Rule;
import org.junit.Test;
import org.junit.function.ThrowingRunnable;
import org.junit.rules.TemporaryFolder;

/** Serving exports (dlrm_engine_export): FP32 as it is, INT8 and INT4 row-wise quantized. */
public class ExportTest {
  @Rule public TemporaryFolder tmp = new TemporaryFolder();

  @Test
  public void precisionsCarryTheHeadersValues() {
    // The C ABI is stable: DLRM_EXPORT_FP32 = 0, DLRM_EXPORT_INT8 = 1, DLRM_EXPORT_INT4 = 2.
    assertEquals(0, ExportPrecision.FP32.code);
    assertEquals(1, ExportPrecision.INT8.code);
    assertEquals(2, ExportPrecision.INT4.code);
    assertEquals(0, DensePrecision.FP32.code);
    assertEquals(0x100, DensePrecision.BF16.code);
    assertEquals(0x200, DensePrecision.FP16.code);
  }

  @Test
  public void sixteenBitDenseParametersServeCloseInASmallerFile() throws Exception {
    Path dir = tmp.getRoot().toPath();
    Path fp32Path = dir.resolve("model.serving");
    Path densePath = dir.resolve("model.dense16.serving");
    try (Engine engine = TestData.trainedEngine(10)) {
      float[] before = engine.predict(reference());
      engine.export(fp32Path);
      engine.export(densePath, ExportPrecision.INT8, DensePrecision.FP16);
      assertThrows(NullPointerException.class,
          () -> engine.export(densePath, ExportPrecision.INT8, null));
      assertTrue("dense16 file " + Files.size(densePath) + " bytes, FP32 " + Files.size(fp32Path),
          Files.size(densePath) < Files.size(fp32Path));
      try (Engine served = Engine.fromCheckpoint(densePath)) {
        float[] got = served.predict(reference());
        for (int i = 0; i < before.length; i++) {
          assertEquals("INT8 + FP16 dense prediction " + i, before[i], got[i], 0.005f);
        }
      }
    }
  }

  @Test
  public void fp32ServesBitwiseAndInt8ServesCloseAndReadOnly() throws Exception {
    Path dir = tmp.getRoot().toPath();
    Path fp32Path = dir.resolve("model.serving");
    Path int8Path = dir.resolve("model.int8.serving");
    Path checkpoint = dir.resolve("engine.ckpt");
    try (Engine engine = TestData.trainedEngine(10)) {
      float[] before = engine.predict(reference());
      engine.export(fp32Path, ExportPrecision.FP32);
      engine.export(int8Path, ExportPrecision.INT8);
      engine.save(checkpoint);
      assertEquals("exporting does not change the engine", 10, engine.step());
      assertTrue("INT8 file " + Files.size(int8Path) + " bytes, FP32 " + Files.size(fp32Path),
          Files.size(int8Path) < Files.size(fp32Path));

      try (Engine fp32 = Engine.fromCheckpoint(fp32Path);
          Engine int8 = Engine.fromCheckpoint(int8Path)) {
        assertEquals(10, fp32.step());
        assertEquals(10, int8.step());
        assertSameBits("FP32 serving model", before, fp32.predict(reference()));

        float[] served = int8.predict(reference());
        assertEquals(before.length, served.length);
        for (int i = 0; i < before.length; i++) {
          assertEquals("INT8 prediction " + i, before[i], served[i], 0.005f);
        }
        assertFalse("INT8 codes change some prediction",
            Arrays.equals(bits(before), bits(served)));

        DlrmException training =
            assertThrows(DlrmException.class, () -> int8.trainStep(batch(2)));
        assertEquals(training.toString(), StatusCode.FAILED_PRECONDITION, training.code());
        assertTrue(training.getMessage(), training.getMessage().contains("has precision INT8"));
        float[] table = new float[50 * 4];
        List<ThrowingRunnable> refused = List.of(
            () -> int8.submitTrainStep(batch(2)),
            () -> int8.save(dir.resolve("int8.ckpt")),
            () -> int8.load(checkpoint),
            () -> int8.writeParameter("embedding.t0.weight", table));
        for (ThrowingRunnable call : refused) {
          DlrmException e = assertThrows(DlrmException.class, call);
          assertEquals(e.toString(), StatusCode.FAILED_PRECONDITION, e.code());
          assertTrue(e.getMessage(), e.getMessage().contains("precision INT8"));
        }
        assertFalse("nothing saved", Files.exists(dir.resolve("int8.ckpt")));
        assertEquals(10, int8.step());
        assertSameBits("INT8 model unchanged by the refused calls", served,
            int8.predict(reference()));
        EvalResult result = int8.evaluate(List.of(reference(), batch(2)));
        assertEquals(2 * TestData.B, result.numSamples());
      }
    }
  }

  @Test
  public void quantizedModelReExportsAsItIs() throws Exception {
    Path dir = tmp.getRoot().toPath();
    Path int8Path = dir.resolve("model.int8.serving");
    Path again = dir.resolve("again.serving");
    Path int4Path = dir.resolve("model.int4.serving");
    try (Engine engine = TestData.trainedEngine(5)) {
      engine.export(int8Path, ExportPrecision.INT8);
      engine.export(int4Path, ExportPrecision.INT4);
      assertTrue("INT4 file smaller than INT8",
          Files.size(int4Path) < Files.size(int8Path));
      try (Engine int4 = Engine.fromCheckpoint(int4Path)) {
        for (float p : int4.predict(reference())) {
          assertTrue("probability " + p, p >= 0 && p <= 1);
        }
      }
    }
    try (Engine int8 = Engine.fromCheckpoint(int8Path)) {
      int8.export(again); // FP32: every table as it is, still INT8
      try (Engine reloaded = Engine.fromCheckpoint(again)) {
        assertSameBits("the same codes", int8.predict(reference()),
            reloaded.predict(reference()));
        assertThrows(DlrmException.class, () -> reloaded.trainStep(batch(2)));
      }
      DlrmException e = assertThrows(DlrmException.class,
          () -> int8.export(dir.resolve("int4.serving"), ExportPrecision.INT4));
      assertEquals(e.toString(), StatusCode.FAILED_PRECONDITION, e.code());
      assertTrue(e.getMessage(), e.getMessage().contains("t0"));
      assertFalse(Files.exists(dir.resolve("int4.serving")));
    }
  }

  @Test
  public void nullsAreRefused() {
    Path path = tmp.getRoot().toPath().resolve("model.serving");
    try (Engine engine = TestData.trainedEngine(1)) {
      NullPointerException noPath = assertThrows(NullPointerException.class,
          () -> engine.export(null, ExportPrecision.INT8));
      assertEquals("path", noPath.getMessage());
      assertThrows(NullPointerException.class, () -> engine.export(null));
      NullPointerException noPrecision =
          assertThrows(NullPointerException.class, () -> engine.export(path, null));
      assertEquals("quantize", noPrecision.getMessage());
      assertFalse("nothing written", Files.exists(path));
    }
  }

  @Test
  public void unwritablePathIsAnIoError() {
    Path path = tmp.getRoot().toPath().resolve("no-such-dir").resolve("model.serving");
    try (Engine engine = TestData.trainedEngine(1)) {
      DlrmException e = assertThrows(DlrmException.class, () -> engine.export(path));
      assertEquals(e.toString(), StatusCode.IO, e.code());
    }
  }
}
