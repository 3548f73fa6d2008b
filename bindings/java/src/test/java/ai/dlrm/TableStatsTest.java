package ai.dlrm;

import static ai.dlrm.TestData.B;
import static ai.dlrm.TestData.CONFIG;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertFalse;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;

import org.junit.Test;

/** Table statistics of a DYNAMIC table (raw long ids) and of a FIXED one. */
public class TableStatsTest {
  private static final String FIXED_T0 = "tables { name: 't0' num_rows: 50 dim: 4 }";
  private static final String DYNAMIC_T0 =
      "tables { name: 't0' num_rows: 6 dim: 4 kind: DYNAMIC dynamic { eviction: LFU } }";
  /** Raw ids of feature 'a': (k + 1) times this, spread over (and wrapping) the long range. */
  private static final long ID_SPREAD = 0x9E3779B97F4A7C1L;

  /** The shared model with table t0 made DYNAMIC with 6 rows (LFU), as in the C test. */
  private static Engine dynamicEngine() {
    assertTrue(CONFIG.contains(FIXED_T0));
    return Engine.create(CONFIG.replace(FIXED_T0, DYNAMIC_T0));
  }

  /** The C test's batch {@code salt} with feature a's ids 0..19 turned into raw ids. */
  private static Batch rawIdBatch(int salt) {
    TestData.Columns c = new TestData.Columns(salt);
    int first = 0;
    for (int i = 0; i < B; i++) {
      first += c.lengths[i];
    }
    for (int i = 0; i < first; i++) {
      c.ids[i] = (c.ids[i] + 1) * ID_SPREAD;
    }
    return c.batch();
  }

  @Test
  public void dynamicTableCountsAdmissionsAndEvictions() {
    try (Engine engine = dynamicEngine()) {
      for (int step = 0; step < 4; step++) {
        engine.trainStep(rawIdBatch(step));
      }
      TableStats s = engine.tableStats("t0");
      assertTrue(s.toString(), s.dynamic());
      assertEquals(6, s.capacity());
      assertTrue(s.toString(), s.size() > 0 && s.size() <= 6);
      assertTrue(s.toString(), s.admitted() > 6 && s.evicted() > 0);
      assertEquals(s.toString(), s.size(), s.admitted() - s.evicted());
      assertTrue(s.toString(), s.lookups() > 0 && s.hits() >= 0 && s.hits() <= s.lookups());
      assertEquals((double) s.hits() / s.lookups(), s.hitRate(), 0.0);
      assertTrue(s.toString(), s.rejected() >= 0 && s.memoryBytes() > 6 * 4 * 4);

      engine.predict(rawIdBatch(1)); // prediction admits nothing
      TableStats after = engine.tableStats("t0");
      assertEquals(s.lookups(), after.lookups());
      assertEquals(s.admitted(), after.admitted());
      assertEquals(s.size(), after.size());
    }
  }

  @Test
  public void fixedTableReportsItsRows() {
    try (Engine engine = dynamicEngine()) {
      engine.trainStep(rawIdBatch(0));
      TableStats s = engine.tableStats("t1");
      assertFalse(s.toString(), s.dynamic());
      assertEquals(20, s.capacity());
      assertEquals(20, s.size());
      assertEquals(0, s.lookups());
      assertEquals(0.0, s.hitRate(), 0.0);
      assertTrue(s.toString(), s.memoryBytes() > 0);
    }
  }

  @Test
  public void unknownTableIsNotFound() {
    Engine engine = dynamicEngine();
    try (engine) {
      DlrmException e = assertThrows(DlrmException.class, () -> engine.tableStats("nope"));
      assertEquals(StatusCode.NOT_FOUND, e.code());
      assertTrue(e.getMessage(), e.getMessage().contains("nope"));
      assertThrows(NullPointerException.class, () -> engine.tableStats(null));
    }
    assertThrows(IllegalStateException.class, () -> engine.tableStats("t0"));
  }
}
