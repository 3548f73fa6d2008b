package ai.dlrm;

import static ai.dlrm.TestData.B;
import static org.junit.Assert.assertArrayEquals;
import static org.junit.Assert.assertEquals;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.Test;

/** Several Java threads on one engine. */
public class ConcurrencyTest {
  private static final int THREADS = 6;
  private static final int BATCHES = 12;

  @Test
  public void concurrentPredictEqualsSerial() throws Exception {
    try (Engine engine = TestData.trainedEngine(10)) {
      List<Batch> batches = new ArrayList<>();
      List<int[]> serial = new ArrayList<>();
      for (int salt = 0; salt < BATCHES; salt++) {
        // Half over arrays, half over direct buffers.
        TestData.Columns c = new TestData.Columns(salt).withWeights();
        Batch batch = salt % 2 == 0 ? c.batch() : c.directBatch();
        batches.add(batch);
        serial.add(TestData.bits(engine.predict(batch)));
      }
      ExecutorService pool = Executors.newFixedThreadPool(THREADS);
      try {
        CountDownLatch start = new CountDownLatch(1);
        List<Future<Integer>> results = new ArrayList<>();
        for (int t = 0; t < THREADS; t++) {
          int offset = t;
          results.add(pool.submit(() -> {
            start.await();
            float[] out = new float[B];
            int checked = 0;
            for (int round = 0; round < 40; round++) {
              int i = (offset * 7 + round) % BATCHES;
              engine.predict(batches.get(i), out);
              assertArrayEquals("thread " + offset + " batch " + i, serial.get(i),
                  TestData.bits(out));
              checked++;
            }
            return checked;
          }));
        }
        start.countDown();
        for (Future<Integer> result : results) {
          assertEquals(40, (int) result.get(60, TimeUnit.SECONDS));
        }
      } finally {
        pool.shutdownNow();
      }
    }
  }

  /** close() while other threads predict: each call either completes or sees a closed engine. */
  @Test
  public void closeWaitsForCallsInFlight() throws Exception {
    Engine engine = TestData.trainedEngine(2);
    float[] expected = engine.predict(TestData.reference());
    ExecutorService pool = Executors.newFixedThreadPool(THREADS);
    AtomicInteger completed = new AtomicInteger();
    AtomicInteger refused = new AtomicInteger();
    try {
      List<Future<?>> results = new ArrayList<>();
      for (int t = 0; t < THREADS; t++) {
        results.add(pool.submit(() -> {
          Batch batch = TestData.reference();
          while (true) {
            try {
              float[] out = engine.predict(batch);
              assertArrayEquals(TestData.bits(expected), TestData.bits(out));
              completed.incrementAndGet();
            } catch (IllegalStateException closed) {
              refused.incrementAndGet();
              return null;
            }
          }
        }));
      }
      while (completed.get() < 50) {
        Thread.sleep(1);
      }
      engine.close();
      for (Future<?> result : results) {
        result.get(60, TimeUnit.SECONDS);
      }
      assertEquals(THREADS, refused.get());
    } finally {
      pool.shutdownNow();
      engine.close();
    }
  }
}
