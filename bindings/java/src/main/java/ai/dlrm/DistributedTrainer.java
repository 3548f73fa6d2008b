package ai.dlrm;

import ai.dlrm.internal.DlrmNative;
import ai.dlrm.internal.NativeEvalResult;
import ai.dlrm.internal.SWIGTYPE_p_jdlrm_trainer;
import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Function;

/**
 * One trainer of a multi-process job: a coordinator, embedding servers that own the embedding
 * tables, and data-parallel trainers (the C ABI's {@code dlrm_trainer}; see the library's
 * DESIGN.md, "A multi-process job"). Every trainer trains on its part of each global batch;
 * in {@code sync} mode the job's losses and parameters are bitwise those of one {@link Engine}
 * trained on the global batches.
 *
 * <pre>{@code
 * Map<String, String> cluster = Map.of("DLRM_ROLE", "trainer", "DLRM_RANK", "2",
 *     "DLRM_WORLD_SIZE", "4", "DLRM_COORDINATOR", "10.0.0.1:7000");
 * try (DistributedTrainer t = new DistributedTrainer(config, cluster)) {
 *   for (Batch part : myParts) {      // this trainer's share of each global batch
 *     t.enqueue(part);
 *     float loss = t.trainStep();
 *   }
 *   t.checkpoint(Path.of("/ckpt/step-100"));
 *   t.finish();
 * }
 * }</pre>
 *
 * <p>The job's settings are the {@code DLRM_*} variables ({@code DLRM_ROLE}, {@code DLRM_RANK},
 * {@code DLRM_WORLD_SIZE}, {@code DLRM_COORDINATOR}, optionally {@code DLRM_BIND_ADDRESS},
 * {@code DLRM_SECRET}, {@code DLRM_TIMEOUT_MS}, {@code DLRM_NET_DELAY_MS}), given as a map (a
 * JVM cannot set its own environment variables) or, for a null map, read from the process
 * environment. The coordinator and the servers run with {@link #runRole}.
 *
 * <p>Collective calls ({@link #trainStep}, {@link #evaluate}, {@link #checkpoint}, {@link
 * #finish}) must be made by every trainer, in the same order. A trainer may bring its own
 * collective ({@link AllGather}, e.g. Spark's barrier {@code allGather}); without one the
 * built-in collective over the job's transport is used. Every wait is bounded by {@code
 * DLRM_TIMEOUT_MS}, and a dead peer is a {@link DlrmException} naming it.
 *
 * <p>Thread safety: the calls on one trainer are serialized (a trainer is meant to be driven
 * by one thread). {@link #close} waits for a call in flight; calls after it throw {@link
 * IllegalStateException}. Close without {@link #finish} leaves the job as failed, which ends
 * it: the other processes fail at once, naming its last failed call's error.
 */
public final class DistributedTrainer implements AutoCloseable {
  static {
    NativeLoader.load();
  }

  private final Handle handle;
  private final Cleaner.Cleanable cleanable;
  private final ReentrantLock lock = new ReentrantLock();
  private volatile boolean closed; // written under the lock
  private final int rank;
  private final int numTrainers;

  /** A trainer using the built-in collective, starting fresh. */
  public DistributedTrainer(String config, Map<String, ?> cluster) {
    this(config, cluster, null, null);
  }

  /** A trainer using the built-in collective, restored from a sharded checkpoint if given. */
  public DistributedTrainer(String config, Map<String, ?> cluster, Path restoreDir) {
    this(config, cluster, restoreDir, null);
  }

  /**
   * Joins the job as a trainer: rendezvous with the coordinator, connections to the servers
   * and the other trainers, and the restore of {@code restoreDir}. Blocks until every
   * trainer has joined (at most {@code DLRM_TIMEOUT_MS}).
   *
   * @param config the model's config in protobuf text format, the same in every process
   * @param cluster the {@code DLRM_*} settings (values are written with {@link
   *     String#valueOf}), or null to read them from the process environment; {@code
   *     DLRM_ROLE} must be {@code trainer}
   * @param restoreDir a sharded checkpoint directory to resume from ({@link #checkpoint}),
   *     or null for a fresh start
   * @param allGather the host's collective, or null for the built-in one
   * @throws IllegalArgumentException if a cluster key or value is not a single line or a key
   *     holds '=' (before anything native runs)
   * @throws DlrmException {@code INVALID_ARGUMENT} naming the bad setting or config field,
   *     {@code TIMEOUT} or {@code NETWORK} naming the peer that did not answer
   */
  public DistributedTrainer(
      String config, Map<String, ?> cluster, Path restoreDir, AllGather allGather) {
    byte[] clusterText = clusterText(cluster);
    byte[] configText = Utf8.cString(config, "config");
    byte[] restore = restoreDir == null ? null : Utf8.path(restoreDir, "restoreDir");
    SWIGTYPE_p_jdlrm_trainer pointer =
        DlrmNative.jdlrm_trainer_create(configText, clusterText, restore, allGather);
    if (pointer == null) { // the wrapper throws on failure; this is a safety net
      throw new IllegalStateException("libdlrm returned no trainer");
    }
    this.handle = new Handle(pointer);
    this.cleanable = Engine.CLEANER.register(this, handle);
    int r;
    int n;
    try {
      r = DlrmNative.jdlrm_trainer_rank(pointer);
      n = DlrmNative.jdlrm_trainer_num_trainers(pointer);
    } catch (RuntimeException | Error e) {
      close();
      throw e;
    }
    this.rank = r;
    this.numTrainers = n;
  }

  /**
   * Runs this process's part when it is the coordinator or an embedding server, and returns
   * when the job has ended. It blocks the calling thread for the whole job (run it on a
   * thread of its own to host a role beside other work).
   *
   * @param config the model's config in protobuf text format, the same in every process
   * @param cluster the {@code DLRM_*} settings, or null for the process environment
   * @throws IllegalArgumentException if a cluster key or value is not a single line or a key
   *     holds '=' (before anything native runs)
   * @throws DlrmException if the settings are bad ({@code INVALID_ARGUMENT} naming them, e.g.
   *     {@code DLRM_ROLE=trainer}, which is {@link DistributedTrainer}'s) or the job failed
   */
  public static void runRole(String config, Map<String, ?> cluster) {
    runRole(config, cluster, null);
  }

  /**
   * As {@link #runRole(String, Map)}; a server loads its shards from {@code restoreDir}, a
   * sharded checkpoint directory (null: a fresh start).
   */
  public static void runRole(String config, Map<String, ?> cluster, Path restoreDir) {
    byte[] clusterText = clusterText(cluster);
    byte[] configText = Utf8.cString(config, "config");
    byte[] restore = restoreDir == null ? null : Utf8.path(restoreDir, "restoreDir");
    DlrmNative.jdlrm_run_role(configText, clusterText, restore);
  }

  // ---- state ------------------------------------------------------------------------------

  /** This trainer's rank among the trainers (the order of its {@code DLRM_RANK} among theirs). */
  public int rank() {
    ensureOpen();
    return rank;
  }

  /** Number of trainers in the job. */
  public int numTrainers() {
    ensureOpen();
    return numTrainers;
  }

  /** Global steps trained (a restored trainer starts at the checkpoint's step). */
  public long step() {
    return call(DlrmNative::jdlrm_trainer_step);
  }

  // ---- training ---------------------------------------------------------------------------

  /**
   * Queues this trainer's part of the next global batch and starts its embedding lookups, so
   * they travel while earlier steps compute. The engine copies the part: its arrays or
   * buffers may be refilled when this returns. Parts must be equal in size on every trainer
   * ({@code reduction_chunk_rows} times a power of two); a bad part fails its step on every
   * trainer.
   */
  public void enqueue(Batch part) {
    Objects.requireNonNull(part, "part");
    call(pointer -> {
      part.enqueue(pointer);
      return null;
    });
  }

  /**
   * Collective: trains the oldest queued part.
   *
   * @return the global batch's mean loss, the same on every trainer
   * @throws DlrmException if any trainer's part was bad (the same message on all, and
   *     nothing changes), a peer failed, or the {@link AllGather} failed
   */
  public float trainStep() {
    return call(DlrmNative::jdlrm_trainer_train_step);
  }

  /** Collective: {@link #enqueue}s {@code part}, then trains the oldest queued part. */
  public float trainStep(Batch part) {
    Objects.requireNonNull(part, "part");
    return call(pointer -> {
      part.enqueue(pointer);
      return DlrmNative.jdlrm_trainer_train_step(pointer);
    });
  }

  /**
   * Collective: log loss and ROC AUC over the given labelled batches, with every update so
   * far applied; the same result on every trainer.
   */
  public EvalResult evaluate(List<Batch> batches) {
    Objects.requireNonNull(batches, "batches");
    return call(pointer -> Batch.evaluate(batches, new Batch.Evaluator() {
      @Override
      public void arrays(long[] shapes, float[][] dense, float[][] labels, int[][] lengths,
          long[][] ids, float[][] weights, long numBatches, NativeEvalResult out) {
        DlrmNative.jdlrm_trainer_evaluate_arrays(
            pointer, shapes, dense, labels, lengths, ids, weights, numBatches, out);
      }

      @Override
      public void buffers(long[] shapes, ByteBuffer[] dense, ByteBuffer[] labels,
          ByteBuffer[] lengths, ByteBuffer[] ids, ByteBuffer[] weights, long numBatches,
          NativeEvalResult out) {
        DlrmNative.jdlrm_trainer_evaluate_buffers(
            pointer, shapes, dense, labels, lengths, ids, weights, numBatches, out);
      }
    }));
  }

  /** Collective: {@link #evaluate(List)} over the given batches. */
  public EvalResult evaluate(Batch... batches) {
    Objects.requireNonNull(batches, "batches");
    return evaluate(Arrays.asList(batches));
  }

  /**
   * Collective: a sharded checkpoint of the current step in {@code dir} (the servers write
   * their shards, trainer 0 the dense state and, last, the MANIFEST). Resume with the
   * {@code restoreDir} of the constructor and of {@link #runRole(String, Map, Path)}.
   */
  public void checkpoint(Path dir) {
    byte[] path = Utf8.path(dir, "dir");
    call(pointer -> {
      DlrmNative.jdlrm_trainer_checkpoint(pointer, path);
      return null;
    });
  }

  /** Collective: waits for every update, tells the servers this trainer is done, leaves. */
  public void finish() {
    call(pointer -> {
      DlrmNative.jdlrm_trainer_finish(pointer);
      return null;
    });
  }

  // ---- lifecycle --------------------------------------------------------------------------

  /**
   * Releases the trainer (and the {@link AllGather}), after a call in flight returns.
   * Idempotent. Without {@link #finish} first, the servers notice the trainer's absence by
   * timeout.
   */
  @Override
  public void close() {
    lock.lock();
    try {
      if (closed) {
        return;
      }
      closed = true;
      cleanable.clean();
    } finally {
      lock.unlock();
    }
  }

  /** Whether {@link #close} was called. */
  public boolean isClosed() {
    return closed;
  }

  /** The native trainer and its destruction; holds no reference to the DistributedTrainer. */
  private static final class Handle implements Runnable {
    final SWIGTYPE_p_jdlrm_trainer pointer;

    Handle(SWIGTYPE_p_jdlrm_trainer pointer) {
      this.pointer = pointer;
    }

    @Override
    public void run() { // at most once: Cleanable.clean() or the Cleaner thread
      DlrmNative.jdlrm_trainer_destroy(pointer);
    }
  }

  private void ensureOpen() {
    if (closed) {
      throw new IllegalStateException("the DistributedTrainer is closed");
    }
  }

  /**
   * Runs {@code op} on the native handle under the lock; the reachability fence keeps the
   * handle from being cleaned during the call. A failure caused by an interrupted {@link
   * AllGather} restores the thread's interrupt status.
   */
  private <T> T call(Function<SWIGTYPE_p_jdlrm_trainer, T> op) {
    lock.lock();
    try {
      ensureOpen();
      return op.apply(handle.pointer);
    } catch (DlrmException e) {
      if (e.getCause() instanceof InterruptedException) {
        Thread.currentThread().interrupt();
      }
      throw e;
    } finally {
      lock.unlock();
      Reference.reachabilityFence(this);
    }
  }

  // ---- settings -----------------------------------------------------------------------------

  /**
   * The settings as the C ABI takes them: "KEY=VALUE" lines, NUL-terminated UTF-8; null for
   * the process environment. Checked here, naming the key, because a line break or '=' in
   * the wrong place would silently change the settings the engine reads.
   */
  static byte[] clusterText(Map<String, ?> cluster) {
    if (cluster == null) {
      return null;
    }
    StringBuilder text = new StringBuilder();
    for (Map.Entry<String, ?> entry : cluster.entrySet()) {
      String key = entry.getKey();
      if (key == null) {
        throw new IllegalArgumentException("cluster has a null key");
      }
      if (entry.getValue() == null) {
        throw new IllegalArgumentException("cluster setting " + quote(key) + " is null");
      }
      String value = String.valueOf(entry.getValue());
      if (!isSingleLine(key) || !isSingleLine(value)) {
        throw new IllegalArgumentException(
            "cluster setting " + quote(key) + " = " + quote(value) + " is not a single line");
      }
      if (key.isEmpty() || key.indexOf('=') >= 0) {
        throw new IllegalArgumentException(
            "cluster setting " + quote(key) + ": a key must be non-empty and hold no '='");
      }
      text.append(key).append('=').append(value).append('\n');
    }
    return Utf8.cString(text.toString(), "cluster");
  }

  private static boolean isSingleLine(String s) {
    return s.indexOf('\n') < 0 && s.indexOf('\r') < 0 && s.indexOf('\0') < 0;
  }

  /** {@code s} in single quotes, line breaks and NULs escaped, so a message stays one line. */
  private static String quote(String s) {
    return "'" + s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        .replace("\0", "\\0") + "'";
  }
}
