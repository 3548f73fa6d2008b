package ai.dlrm;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertNull;
import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;
import static org.junit.Assume.assumeTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.regex.Pattern;
import org.junit.After;
import org.junit.Test;

/**
 * ai.dlrm.Log: the library's log in Java. A job (DistributedTrainerTest's, with its
 * coordinator on a thread the JVM does not know) routed into java.util.logging delivers the
 * coordinator's, the server's and the trainers' lines as records pointing at engine/
 * sources, the native thread attached as a daemon; after toStderr a handler gets nothing; a
 * bad level is refused by name and changes nothing; a throwing handler never reaches the
 * library. Every test restores the default sink.
 */
public class LogTest {
  private static final Pattern COORDINATOR =
      Pattern.compile("coordinator .*: rendezvous complete: .*");
  private static final Pattern SERVES = Pattern.compile("server 0 \\(rank 0\\) serves .*");
  private static final Pattern SERVER_DONE = Pattern.compile("server 0: every trainer is done.*");
  private static final Pattern CHECKPOINT =
      Pattern.compile("trainer [01]: checkpoint of step 4 in .*");

  @After
  public void defaultSink() {
    Log.toStderr(LogLevel.INFO);
  }

  /** Runs dlrm_run_role on a fresh pthread (src/test/native/native_thread.c); null or the error. */
  private static native String runRoleOnNativeThread(byte[] config, byte[] cluster);

  private static void loadTestLibrary() {
    String library = System.getProperty("dlrm.test.nativeLib");
    assumeTrue("needs -Ddlrm.test.nativeLib (ctest java_tests sets it)", library != null);
    NativeLoader.load(); // first: the test library's libdlrm must be this one
    System.load(library);
  }

  private static void nativeRole(String config, Map<String, String> cluster) {
    StringBuilder text = new StringBuilder();
    cluster.forEach((k, v) -> text.append(k).append('=').append(v).append('\n'));
    String error = runRoleOnNativeThread(config.getBytes(StandardCharsets.UTF_8),
        text.toString().getBytes(StandardCharsets.UTF_8));
    if (error != null) {
      throw new AssertionError("role on a native thread: " + error);
    }
  }

  /** A job whose trainers train STEPS steps, checkpoint and finish. */
  private static void runJob(DistributedTrainerTest.RoleRunner coordinator) throws Exception {
    Path checkpoint = Files.createTempDirectory("dlrm-log-ckpt");
    try {
      DistributedTrainerTest.runJob(coordinator, r -> null, (r, trainer) -> {
        for (int i = 0; i < DistributedTrainerTest.STEPS; i++) {
          trainer.trainStep(DistributedTrainerTest.part(r, i, false));
        }
        trainer.checkpoint(checkpoint.resolve("step"));
        trainer.finish();
      });
    } finally {
      DistributedTrainerTest.deleteRecursively(checkpoint);
    }
  }

  /** What a java.util.logging handler saw, with the thread it ran on. */
  private static final class Seen {
    final LogRecord record;
    final String thread;
    final boolean daemon;

    Seen(LogRecord record) {
      this.record = record;
      this.thread = Thread.currentThread().getName();
      this.daemon = Thread.currentThread().isDaemon();
    }
  }

  private static Logger collectingLogger(String name, ConcurrentLinkedQueue<Seen> seen) {
    Logger logger = Logger.getLogger(name);
    logger.setUseParentHandlers(false);
    logger.setLevel(Level.ALL);
    for (Handler h : logger.getHandlers()) {
      logger.removeHandler(h);
    }
    logger.addHandler(new Handler() {
      @Override
      public void publish(LogRecord record) {
        seen.add(new Seen(record));
      }

      @Override
      public void flush() {}

      @Override
      public void close() {}
    });
    return logger;
  }

  private static List<Seen> matching(Iterable<Seen> seen, Pattern pattern) {
    List<Seen> out = new ArrayList<>();
    for (Seen s : seen) {
      if (pattern.matcher(s.record.getMessage()).matches()) {
        out.add(s);
      }
    }
    return out;
  }

  @Test
  public void theJobsLinesReachJavaLoggingFromJavaAndNativeThreads() throws Exception {
    loadTestLibrary();
    ConcurrentLinkedQueue<Seen> seen = new ConcurrentLinkedQueue<>();
    Log.toJavaLogging(collectingLogger("ai.dlrm.LogTest.job", seen), LogLevel.INFO);
    List<LogMessage> refused = new ArrayList<>();
    DlrmException bad = assertThrows(DlrmException.class, () -> Log.setHandler(refused::add, 9));
    assertEquals(StatusCode.INVALID_ARGUMENT, bad.code()); // and the logger stays installed
    runJob(LogTest::nativeRole);

    List<Seen> coordinator = matching(seen, COORDINATOR);
    assertEquals(seen.toString(), 1, coordinator.size());
    assertEquals(1, matching(seen, SERVES).size());
    assertEquals(1, matching(seen, SERVER_DONE).size());
    assertEquals(2, matching(seen, CHECKPOINT).size());
    // The coordinator ran on a pthread: the trampoline attached it, as a daemon.
    assertEquals("dlrm-log", coordinator.get(0).thread);
    assertTrue(coordinator.get(0).daemon);
    for (Seen s : seen) {
      String source = s.record.getSourceClassName();
      assertTrue(source, source.matches("engine/[\\w/]+\\.cc:[1-9]\\d*"));
      assertEquals("ai.dlrm.LogTest.job", s.record.getLoggerName());
      assertNull(s.record.getSourceMethodName());
    }
    for (Pattern p : List.of(COORDINATOR, SERVES, SERVER_DONE, CHECKPOINT)) {
      for (Seen s : matching(seen, p)) {
        assertEquals(s.record.getMessage(), Level.INFO, s.record.getLevel());
      }
    }
    assertTrue(refused.isEmpty());
  }

  @Test
  public void afterToStderrAHandlerGetsNothing() throws Exception {
    ConcurrentLinkedQueue<LogMessage> got = new ConcurrentLinkedQueue<>();
    Log.setHandler(got::add, LogLevel.DEBUG);
    Log.toStderr(LogLevel.INFO);
    runJob(DistributedTrainer::runRole);
    assertTrue(got.toString(), got.isEmpty());
  }

  @Test
  public void badLevelsAreRefusedByName() {
    for (int bad : new int[] {LogLevel.OFF.code() + 1, -1, Integer.MAX_VALUE}) {
      DlrmException e = assertThrows(DlrmException.class, () -> Log.setHandler(m -> {}, bad));
      assertEquals(e.toString(), StatusCode.INVALID_ARGUMENT, e.code());
      assertTrue(e.getMessage(), e.getMessage().contains("min_level"));
      assertTrue(e.getMessage(), e.getMessage().contains(String.valueOf(bad)));
    }
    NullPointerException level =
        assertThrows(NullPointerException.class, () -> Log.setHandler(m -> {}, null));
    assertEquals("minLevel", level.getMessage());
    NullPointerException logger =
        assertThrows(NullPointerException.class, () -> Log.toJavaLogging(null, LogLevel.INFO));
    assertEquals("logger", logger.getMessage());
  }

  @Test
  public void levelsMatchTheHeaderAndJavaLogging() {
    LogLevel[] levels = LogLevel.values();
    Level[] java = {Level.FINE, Level.INFO, Level.WARNING, Level.SEVERE, Level.OFF};
    for (int i = 0; i < levels.length; i++) {
      assertEquals(i, levels[i].code());
      assertSame(java[i], levels[i].javaLevel());
    }
    assertSame(LogLevel.ERROR, LogLevel.ofMessage(7)); // newer than this binding
    assertEquals("[dlrm WARNING engine/x.cc:3] text",
        new LogMessage(LogLevel.WARNING, "engine/x.cc", 3, "text").toString());
  }

  @Test
  public void aThrowingHandlerReportsToTheThreadAndReturns() throws Exception {
    AtomicReference<Throwable> reported = new AtomicReference<>();
    Consumer<LogMessage> boom = m -> {
      throw new IllegalStateException("boom: " + m.message());
    };
    Log.Sink sink = new Log.Sink(boom);
    Thread thread = new Thread(() -> sink.deliver(1, "engine/a.cc".getBytes(
        StandardCharsets.UTF_8), 5, "h\u00e9".getBytes(StandardCharsets.UTF_8)));
    thread.setUncaughtExceptionHandler((t, e) -> reported.set(e));
    thread.start();
    thread.join();
    assertTrue(String.valueOf(reported.get()), reported.get() instanceof IllegalStateException);
    assertEquals("boom: h\u00e9", reported.get().getMessage()); // decoded as UTF-8
  }
}
