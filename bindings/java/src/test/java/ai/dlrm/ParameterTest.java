package ai.dlrm;

import static ai.dlrm.TestData.ND;
import static ai.dlrm.TestData.assertSameBits;
import static ai.dlrm.TestData.reference;
import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertThrows;

import java.util.Arrays;
import java.util.List;
import org.junit.Test;

/** Parameters as named arrays: names, shapes, bitwise read/write round trips. */
public class ParameterTest {
  @Test
  public void namesAndShapes() {
    try (Engine engine = Engine.create(TestData.CONFIG)) {
      List<String> names = engine.parameterNames();
      assertEquals("two 2-layer MLPs, two tables", 2 * 2 + 2 * 2 + 2, names.size());
      assertEquals("bottom_mlp.0.weight", names.get(0));
      assertEquals("embedding.t1.weight", names.get(names.size() - 1));
      assertThrows(UnsupportedOperationException.class, () -> names.add("x"));
      assertArrayEquals(new long[] {8, ND}, engine.parameterShape("bottom_mlp.0.weight"));
      assertArrayEquals(new long[] {50, 4}, engine.parameterShape("embedding.t0.weight"));
      for (String name : names) {
        long size = Arrays.stream(engine.parameterShape(name)).reduce(1, (a, b) -> a * b);
        assertEquals(name, size, engine.readParameter(name).length);
      }
    }
  }

  @Test
  public void writeThenReadIsBitwiseIdentical() {
    try (Engine engine = TestData.trainedEngine(3)) {
      String name = "embedding.t0.weight";
      float[] original = engine.readParameter(name);
      float[] before = engine.predict(reference());
      float[] values = new float[original.length];
      for (int i = 0; i < values.length; i++) {
        values[i] = i * 0.001f;
      }
      // Bit patterns a lossy path would disturb: -0, subnormals, extremes.
      values[1] = -0.0f;
      values[2] = Float.MIN_VALUE;
      values[3] = -Float.MIN_NORMAL / 3;
      values[4] = Float.MAX_VALUE;
      values[5] = Math.nextUp(1.0f);
      engine.writeParameter(name, values);
      assertSameBits("read back", values, engine.readParameter(name));
      assertFalse(Arrays.equals(TestData.bits(before), TestData.bits(engine.predict(reference()))));

      engine.writeParameter(name, original);
      assertSameBits("restored", original, engine.readParameter(name));
      assertSameBits("predictions restored", before, engine.predict(reference()));
    }
  }

  @Test
  public void everyParameterRoundTrips() {
    try (Engine engine = TestData.trainedEngine(2)) {
      float[] before = engine.predict(reference());
      for (String name : engine.parameterNames()) {
        float[] values = engine.readParameter(name);
        engine.writeParameter(name, values);
        assertSameBits(name, values, engine.readParameter(name));
      }
      assertSameBits("unchanged model", before, engine.predict(reference()));
    }
  }
}
