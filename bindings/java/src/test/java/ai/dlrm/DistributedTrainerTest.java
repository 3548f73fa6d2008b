package ai.dlrm;

import static ai.dlrm.TestData.B;
import static ai.dlrm.TestData.ND;
import static ai.dlrm.TestData.NF;
import static ai.dlrm.TestData.assertSameBits;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;
import static org.junit.Assert.fail;
import static org.junit.Assume.assumeTrue;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Queue;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.IntFunction;
import java.util.stream.Stream;
import org.junit.Test;

/**
 * DistributedTrainer: a job of a coordinator, an embedding server and 2 trainers as threads
 * of this JVM over loopback TCP. Sync training equals the single-process Engine on the same
 * global batches, bitwise, with the built-in collective and with a Java AllGather; a failing
 * AllGather fails the call with a DlrmException naming it; bad settings are refused by name.
 * (bindings/python/tests/test_distributed.py in Java.)
 */
public class DistributedTrainerTest {
  /** Every table on the servers. */
  static final String CONFIG =
      TestData.CONFIG + "\nsharding { data_parallel_max_bytes: 0 }\n";
  static final int SERVERS = 1;
  static final int TRAINERS = 2;
  static final int STEPS = 4;
  private static final int EVAL_SALT = 9;
  /** DLRM_TIMEOUT_MS of the jobs: every wait of a broken job ends within it. */
  private static final int TIMEOUT_MS = 8_000;

  // ---- (1) a sync job equals one engine, bitwise -------------------------------------------

  /** What one engine gives on the global batches: the losses, then the evaluation. */
  private static final class Reference {
    final float[] losses = new float[STEPS];
    final EvalResult eval;

    Reference() {
      try (Engine engine = Engine.create(CONFIG)) {
        for (int i = 0; i < STEPS; i++) {
          losses[i] = engine.trainStep(TestData.batch(i));
        }
        eval = engine.evaluate(List.of(TestData.batch(EVAL_SALT)));
      }
    }
  }

  /** What one trainer saw. */
  private static final class TrainerRun {
    final float[] losses = new float[STEPS];
    EvalResult eval;
  }

  @Test
  public void syncJobEqualsOneEngineBitwiseWithTheBuiltInCollective() throws Exception {
    checkSyncJob(null);
  }

  @Test
  public void syncJobEqualsOneEngineBitwiseWithAJavaAllGather() throws Exception {
    BarrierGather gather = new BarrierGather();
    checkSyncJob(gather); // and over direct buffers
    // Per trainer: STEPS train steps, the checkpoint, the evaluation and finish.
    assertEquals(TRAINERS * (STEPS + 3), gather.calls.get());
  }

  /**
   * With no servers the trainers own the shards (the Neo layout), and the all-gather runs
   * inside the constructor already (the trainers compare their plans).
   */
  @Test
  public void serverlessJobWithAJavaAllGatherEqualsOneEngineBitwise() throws Exception {
    checkSyncJob(new BarrierGather(), 0);
  }

  private void checkSyncJob(BarrierGather gather) throws Exception {
    checkSyncJob(gather, SERVERS);
  }

  /**
   * A job of {@code servers} servers: with the built-in collective over array batches, with
   * {@code gather} over direct ones.
   */
  private void checkSyncJob(BarrierGather gather, int servers) throws Exception {
    boolean direct = gather != null;
    Reference want = new Reference();
    TrainerRun[] runs = new TrainerRun[TRAINERS];
    Path checkpoint = Files.createTempDirectory("dlrm-dist-ckpt");
    try {
      runJob(DistributedTrainer::runRole, servers, r -> gather == null ? null : gather.member(r),
          (r, trainer) -> {
        TrainerRun run = new TrainerRun();
        assertEquals(r, trainer.rank());
        assertEquals(TRAINERS, trainer.numTrainers());
        assertEquals(0, trainer.step());
        trainer.enqueue(part(r, 0, direct));
        for (int i = 1; i < STEPS; i++) {
          trainer.enqueue(part(r, i, direct)); // one part's lookups in flight
          run.losses[i - 1] = trainer.trainStep();
        }
        run.losses[STEPS - 1] = trainer.trainStep();
        assertEquals(STEPS, trainer.step());
        trainer.checkpoint(checkpoint.resolve("step-" + STEPS));
        // Every trainer evaluates the global batch; each scores its share of it.
        TestData.Columns eval = new TestData.Columns(EVAL_SALT);
        run.eval = trainer.evaluate(direct ? eval.directBatch() : eval.batch());
        trainer.finish();
        runs[r] = run;
      });
      assertTrue("MANIFEST written",
          Files.isRegularFile(checkpoint.resolve("step-" + STEPS).resolve("MANIFEST")));
    } finally {
      deleteRecursively(checkpoint);
    }
    for (int r = 0; r < TRAINERS; r++) {
      assertSameBits("losses of trainer " + r, want.losses, runs[r].losses);
      EvalResult got = runs[r].eval;
      assertEquals("eval samples of trainer " + r, B, got.numSamples());
      assertEquals("log loss of trainer " + r, Double.doubleToRawLongBits(want.eval.logLoss()),
          Double.doubleToRawLongBits(got.logLoss()));
      assertEquals("auc of trainer " + r, Double.doubleToRawLongBits(want.eval.auc()),
          Double.doubleToRawLongBits(got.auc()));
    }
  }

  // ---- (3) a failing AllGather ----------------------------------------------------------------

  @Test
  public void aFailingAllGatherFailsTheCallByNameAndTheTrainerCarriesOn() throws Exception {
    BarrierGather gather = new BarrierGather();
    AtomicInteger total = new AtomicInteger();
    runJob(r -> {
      AtomicInteger call = new AtomicInteger(); // this trainer's calls
      return mine -> {
        total.incrementAndGet();
        switch (call.incrementAndGet()) {
          case 1: // the train step
            throw new IllegalStateException("boom on trainer " + r);
          case 2: // the first evaluation: one array instead of one per trainer
            return new byte[][] {mine};
          default:
            return gather.member(r).allGather(mine);
        }
      };
    }, (r, trainer) -> {
      trainer.enqueue(part(r, 0, false));
      DlrmException thrown = assertThrows(DlrmException.class, trainer::trainStep);
      assertEquals(StatusCode.NETWORK, thrown.code());
      assertTrue(thrown.getMessage(), thrown.getMessage().contains("all-gather returned 1"));
      assertTrue(thrown.getMessage(), thrown.getMessage().contains("boom on trainer " + r));
      assertTrue(thrown.getCause() instanceof IllegalStateException);
      assertEquals("boom on trainer " + r, thrown.getCause().getMessage());
      assertEquals(0, trainer.step());

      Batch eval = TestData.batch(EVAL_SALT);
      DlrmException shortResult = assertThrows(DlrmException.class, () -> trainer.evaluate(eval));
      assertEquals(StatusCode.NETWORK, shortResult.code());
      assertTrue(shortResult.getMessage(),
          shortResult.getMessage().contains("returned 1 arrays for 2 trainers"));

      // The trainer is still usable: a collective through a working gather succeeds.
      assertEquals(B, trainer.evaluate(eval).numSamples());
      trainer.finish();
    });
    assertEquals(4 * TRAINERS, total.get()); // step, 2 evaluations, finish: all through it
  }

  // ---- (2) bad settings ------------------------------------------------------------------------

  @Test
  public void badSettingsAreRefusedByNameAndLeaveNothingRunning() throws Exception {
    int port = freePort();
    refuseBadSettings(port); // warm up: classes loaded, library threads (if any) started
    long threadsBefore = nativeThreads();
    long started = System.nanoTime();
    for (int round = 0; round < 5; round++) {
      refuseBadSettings(port);
    }
    long seconds = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - started);
    assertTrue("refusals must not wait for a job (" + seconds + " s)", seconds < 5);
    // A refused trainer or role must leave no thread (a pool, a listener) behind: 5 rounds of
    // 7 refusals would leave dozens.
    long threadsAfter = nativeThreads();
    assertTrue("threads: " + threadsBefore + " before, " + threadsAfter + " after",
        threadsAfter <= threadsBefore + 3);
  }

  private static void refuseBadSettings(int port) {
    assertRefused(() -> new DistributedTrainer(CONFIG, cluster("server", 0, port, 20_000)),
        "DLRM_ROLE=server");
    assertRefused(() -> new DistributedTrainer(CONFIG, Map.of("HOME", "/root")), "not a DLRM_");
    assertRefused(() -> new DistributedTrainer(CONFIG, cluster("trainer", 9, port, 20_000)),
        "DLRM_RANK");
    assertRefused(() -> DistributedTrainer.runRole(CONFIG, cluster("trainer", 1, port, 20_000)),
        "dlrm_trainer_create");

    // Refused in Java, naming the key, before anything native runs: the config is not even
    // protobuf text, so a native call would have failed on it instead.
    String notAConfig = "model {";
    IllegalArgumentException newline = assertThrows(IllegalArgumentException.class,
        () -> new DistributedTrainer(notAConfig, Map.of("DLRM_ROLE", "trainer\nDLRM_RANK=1")));
    assertTrue(newline.getMessage(), newline.getMessage().contains("'DLRM_ROLE'"));
    assertTrue(newline.getMessage(), newline.getMessage().contains("single line"));
    IllegalArgumentException keyLine = assertThrows(IllegalArgumentException.class,
        () -> DistributedTrainer.runRole(notAConfig, Map.of("DLRM_RANK\nDLRM_ROLE", "server")));
    assertTrue(keyLine.getMessage(), keyLine.getMessage().contains("'DLRM_RANK\\nDLRM_ROLE'"));
    IllegalArgumentException equals = assertThrows(IllegalArgumentException.class,
        () -> new DistributedTrainer(notAConfig, Map.of("DLRM_ROLE=trainer", "x")));
    assertTrue(equals.getMessage(), equals.getMessage().contains("'DLRM_ROLE=trainer'"));
    assertThrows(NullPointerException.class, () -> new DistributedTrainer(null, null));
  }

  private static void assertRefused(org.junit.function.ThrowingRunnable call, String named) {
    DlrmException e = assertThrows(DlrmException.class, call);
    assertEquals(e.getMessage(), StatusCode.INVALID_ARGUMENT, e.code());
    assertTrue("message names " + named + ": " + e.getMessage(), e.getMessage().contains(named));
  }

  /** Threads of this process, Java and native. */
  private static long nativeThreads() throws IOException {
    Path tasks = Path.of("/proc/self/task");
    assumeTrue("needs /proc/self/task", Files.isDirectory(tasks));
    try (Stream<Path> list = Files.list(tasks)) {
      return list.count();
    }
  }

  // ---- the job ---------------------------------------------------------------------------------

  /** One trainer's work in the job. */
  interface TrainerBody {
    void run(int rank, DistributedTrainer trainer) throws Exception;
  }

  /** How a role of the job is run (DistributedTrainer::runRole, or another way). */
  interface RoleRunner {
    void run(String config, Map<String, String> cluster) throws Exception;
  }

  private static void runJob(IntFunction<AllGather> gathers, TrainerBody body)
      throws Exception {
    runJob(DistributedTrainer::runRole, gathers, body);
  }

  /**
   * Runs a coordinator (by {@code coordinator}), SERVERS servers and TRAINERS trainers as
   * threads; fails with every error any of them raised, and if a thread is still running
   * after the job.
   */
  static void runJob(RoleRunner coordinator, IntFunction<AllGather> gathers, TrainerBody body)
      throws Exception {
    runJob(coordinator, SERVERS, gathers, body);
  }

  /** runJob with {@code servers} servers (0: the trainers own the shards). */
  static void runJob(RoleRunner coordinator, int servers, IntFunction<AllGather> gathers,
      TrainerBody body) throws Exception {
    int timeoutMs = TIMEOUT_MS;
    int port = freePort();
    Queue<Throwable> errors = new ConcurrentLinkedQueue<>();
    List<Thread> threads = new ArrayList<>();
    threads.add(start("coordinator", errors,
        () -> coordinator.run(CONFIG, cluster("coordinator", -1, port, timeoutMs, servers))));
    Thread.sleep(200); // the coordinator binds its port before the peers bind theirs
    for (int s = 0; s < servers; s++) {
      int rank = s;
      threads.add(start("server-" + s, errors, () -> DistributedTrainer.runRole(CONFIG,
          cluster("server", rank, port, timeoutMs, servers))));
    }
    for (int r = 0; r < TRAINERS; r++) {
      int rank = r;
      threads.add(start("trainer-" + r, errors, () -> {
        DistributedTrainer trainer = new DistributedTrainer(
            CONFIG, cluster("trainer", servers + rank, port, timeoutMs, servers), null,
            gathers.apply(rank));
        try {
          body.run(rank, trainer);
        } finally {
          trainer.close();
        }
        trainer.close(); // idempotent
        assertTrue(trainer.isClosed());
        assertThrows(IllegalStateException.class, trainer::step);
        assertThrows(IllegalStateException.class, trainer::rank);
      }));
    }
    // A job that went well ends at once; a broken one within a few timeouts. The threads are
    // daemons: one left blocked in native code does not keep the JVM alive.
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(3L * timeoutMs);
    for (Thread t : threads) {
      t.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime())));
    }
    for (Thread t : threads) {
      if (t.isAlive()) {
        fail(t.getName() + " still runs after " + 3 * timeoutMs + " ms; errors: " + errors);
      }
    }
    if (!errors.isEmpty()) {
      Throwable first = errors.peek();
      AssertionError failure = new AssertionError("the job failed: " + errors, first);
      throw failure;
    }
  }

  private interface Work {
    void run() throws Exception;
  }

  private static Thread start(String name, Queue<Throwable> errors, Work work) {
    Thread thread = new Thread(() -> {
      try {
        work.run();
      } catch (Throwable e) { // reported by runJob
        errors.add(new AssertionError(name + ": " + e, e));
      }
    }, "dlrm-" + name);
    thread.setDaemon(true);
    thread.start();
    return thread;
  }

  private static Map<String, String> cluster(String role, int rank, int port, int timeoutMs) {
    return cluster(role, rank, port, timeoutMs, SERVERS);
  }

  private static Map<String, String> cluster(String role, int rank, int port, int timeoutMs,
      int servers) {
    Map<String, String> c = new LinkedHashMap<>();
    c.put("DLRM_ROLE", role);
    c.put("DLRM_WORLD_SIZE", String.valueOf(servers + TRAINERS));
    c.put("DLRM_COORDINATOR", "127.0.0.1:" + port);
    c.put("DLRM_TIMEOUT_MS", String.valueOf(timeoutMs));
    if (rank >= 0) {
      c.put("DLRM_RANK", String.valueOf(rank));
    }
    return c;
  }

  private static int freePort() throws IOException {
    try (ServerSocket socket = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      return socket.getLocalPort();
    }
  }

  /**
   * Samples of trainer r (of TRAINERS) of global batch {@code salt} (TestData.batch), over
   * arrays or direct buffers.
   */
  static Batch part(int r, int salt, boolean direct) {
    TestData.Columns global = new TestData.Columns(salt);
    int lo = r * B / TRAINERS;
    int hi = (r + 1) * B / TRAINERS;
    int n = hi - lo;
    int[] offsets = new int[NF * B + 1];
    for (int i = 0; i < NF * B; i++) {
      offsets[i + 1] = offsets[i] + global.lengths[i];
    }
    int[] lengths = new int[NF * n];
    long[] ids = new long[global.ids.length];
    int numIds = 0;
    for (int f = 0; f < NF; f++) {
      for (int j = lo; j < hi; j++) {
        int bag = f * B + j;
        lengths[f * n + (j - lo)] = global.lengths[bag];
        for (int k = offsets[bag]; k < offsets[bag + 1]; k++) {
          ids[numIds++] = global.ids[k];
        }
      }
    }
    float[] dense = Arrays.copyOfRange(global.dense, lo * ND, hi * ND);
    float[] labels = Arrays.copyOfRange(global.labels, lo, hi);
    long[] partIds = Arrays.copyOf(ids, numIds);
    if (direct) {
      return Batch.directBuilder().dense(TestData.direct(dense)).labels(TestData.direct(labels))
          .lengths(TestData.direct(lengths)).ids(TestData.direct(partIds)).build();
    }
    return Batch.builder().dense(dense).labels(labels).lengths(lengths).ids(partIds).build();
  }

  /** Every trainer's bytes in rank order, over a barrier (a stand-in for Spark's allGather). */
  private static final class BarrierGather {
    final CyclicBarrier barrier = new CyclicBarrier(TRAINERS);
    final byte[][] slots = new byte[TRAINERS][];
    final AtomicInteger calls = new AtomicInteger();

    AllGather member(int rank) {
      return mine -> {
        calls.incrementAndGet();
        slots[rank] = mine;
        barrier.await(TIMEOUT_MS, TimeUnit.MILLISECONDS);
        byte[][] all = slots.clone();
        barrier.await(TIMEOUT_MS, TimeUnit.MILLISECONDS); // nobody overwrites a slot still being read
        return all;
      };
    }
  }

  static void deleteRecursively(Path root) throws IOException {
    if (!Files.exists(root)) {
      return;
    }
    try (Stream<Path> paths = Files.walk(root)) {
      paths.sorted(Comparator.reverseOrder()).forEach(p -> {
        try {
          Files.delete(p);
        } catch (IOException e) {
          throw new java.io.UncheckedIOException(e);
        }
      });
    }
  }
}
