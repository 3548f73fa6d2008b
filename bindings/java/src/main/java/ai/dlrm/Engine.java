package ai.dlrm;

import ai.dlrm.internal.DlrmNative;
import ai.dlrm.internal.NativeEvalResult;
import ai.dlrm.internal.NativeTableStats;
import ai.dlrm.internal.SWIGTYPE_p_dlrm_engine;
import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.Consumer;
import java.util.function.Function;

/**
 * A DLRM training engine: one native {@code dlrm_engine}, configured by protobuf text.
 *
 * <p>Close it when done ({@code try (Engine e = Engine.create(config)) {...}}): it holds native
 * memory the garbage collector does not see. A forgotten engine is still destroyed once
 * unreachable, by a {@link Cleaner}, but only whenever the collector gets to it.
 *
 * <p>Thread safety: all methods may be called from any thread. Predictions, evaluation,
 * saving, exporting and the getters of one engine run concurrently; training steps, {@link
 * #setLearningRate}, {@link #load} and {@link #writeParameter} serialize with everything else
 * (the library's reader/writer lock). {@link #close} waits for calls in flight, because the
 * native handle must never be destroyed under a running call; calls after it throw {@link
 * IllegalStateException}.
 *
 * <p>Errors: invalid input raises {@link DlrmException} with the engine's status code and a
 * message naming the argument or field; a failed call leaves the engine unchanged.
 */
public final class Engine implements AutoCloseable {
  static {
    NativeLoader.load();
  }

  /** Destroys forgotten native handles (engines and distributed trainers). */
  static final Cleaner CLEANER = Cleaner.create();
  private static final AtomicLong RELEASED_BY_CLEANER = new AtomicLong();
  private static final System.Logger LOG = System.getLogger(Engine.class.getName());

  private final Handle handle;
  private final Cleaner.Cleanable cleanable;
  /** Read lock: any call on the handle. Write lock: close. */
  private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
  private boolean closed; // written under the write lock, read under either

  private Engine(SWIGTYPE_p_dlrm_engine pointer) {
    if (pointer == null) { // the wrapper throws on failure; this is a safety net
      throw new IllegalStateException("libdlrm returned no engine");
    }
    this.handle = new Handle(pointer);
    this.cleanable = CLEANER.register(this, handle);
  }

  /**
   * The native handle and its destruction. Deliberately holds no reference to the Engine,
   * so the Cleaner can run it once the Engine is unreachable.
   */
  private static final class Handle implements Runnable {
    final SWIGTYPE_p_dlrm_engine pointer;
    volatile boolean closedByOwner;

    Handle(SWIGTYPE_p_dlrm_engine pointer) {
      this.pointer = pointer;
    }

    @Override
    public void run() { // at most once: Cleanable.clean() or the Cleaner thread
      if (!closedByOwner) {
        RELEASED_BY_CLEANER.incrementAndGet();
        LOG.log(System.Logger.Level.DEBUG, "an unclosed dlrm Engine was released by its Cleaner");
      }
      DlrmNative.dlrm_engine_destroy(pointer);
    }
  }

  // ---- construction -----------------------------------------------------------------

  /**
   * An engine from a config in protobuf text format (schema {@code dlrm.proto}).
   *
   * @throws DlrmException {@code INVALID_ARGUMENT} naming the field, if the config does not
   *     parse or is invalid
   */
  public static Engine create(String configText) {
    return new Engine(DlrmNative.jdlrm_create(Utf8.cString(configText, "configText")));
  }

  /**
   * An engine from a config file in protobuf text format.
   *
   * @throws DlrmException {@code IO} if the file cannot be read, {@code INVALID_ARGUMENT} if
   *     the config is invalid
   */
  public static Engine fromFile(Path configPath) {
    return new Engine(DlrmNative.jdlrm_create_from_file(Utf8.path(configPath, "configPath")));
  }

  /**
   * An engine restored from a checkpoint written by {@link #save}, which stores the config:
   * same parameters, optimizer state, step and learning rates. Also loads a serving model
   * written by {@link #export(Path, ExportPrecision)}.
   *
   * @throws DlrmException {@code IO} if the file cannot be read, {@code DATA_LOSS} if it is
   *     truncated or corrupted
   */
  public static Engine fromCheckpoint(Path checkpoint) {
    return new Engine(
        DlrmNative.jdlrm_create_from_checkpoint(Utf8.path(checkpoint, "checkpoint")));
  }

  /**
   * As {@link #fromCheckpoint(Path)}, on {@code device} instead of the device the checkpoint
   * was trained on: {@code "cpu"}, {@code "cuda"} or {@code "cuda:N"} ({@code null} or
   * {@code ""}: the checkpoint's own). The state is the same on every device, so a checkpoint
   * trained on a GPU serves on a machine without one.
   *
   * @throws DlrmException {@code INVALID_ARGUMENT} naming the device for any other name,
   *     {@code FAILED_PRECONDITION} for a CUDA device this machine cannot use, and as {@link
   *     #fromCheckpoint(Path)} for the checkpoint
   */
  public static Engine fromCheckpoint(Path checkpoint, String device) {
    byte[] path = Utf8.path(checkpoint, "checkpoint");
    byte[] cDevice = device == null ? null : Utf8.cString(device, "device");
    return new Engine(DlrmNative.jdlrm_create_from_checkpoint_on(path, cDevice));
  }

  // ---- training and inference -------------------------------------------------------

  /**
   * One optimizer step on a labelled batch.
   *
   * @return the batch's mean binary cross-entropy before the update
   * @throws DlrmException if the batch does not fit the model or holds invalid values
   */
  public float trainStep(Batch batch) {
    Objects.requireNonNull(batch, "batch");
    return call(batch::trainStep);
  }

  /**
   * Queues a training step without waiting for it and returns its ticket. The engine
   * validates and copies the batch during this call (a bad batch throws here and nothing is
   * queued), so its arrays or buffers may be refilled at once while the step trains. Steps
   * run in submission order and give bitwise the results of {@link #trainStep} in that order.
   */
  public long submitTrainStep(Batch batch) {
    Objects.requireNonNull(batch, "batch");
    return call(batch::trainSubmit);
  }

  /**
   * Waits for a submitted step and returns its loss. A step queued behind a failed one
   * throws {@link DlrmException} with {@link StatusCode#CANCELLED}; each ticket can be
   * waited for once.
   */
  public float waitTrainStep(long ticket) {
    return call(h -> DlrmNative.jdlrm_train_wait(h, ticket));
  }

  /** Click probabilities, one per sample of the batch (labels, if any, are ignored). */
  public float[] predict(Batch batch) {
    Objects.requireNonNull(batch, "batch");
    float[] out = new float[batch.batchSize()];
    predict(batch, out);
    return out;
  }

  /**
   * Click probabilities into {@code out[0 .. batchSize)}, for callers that reuse one array.
   * On failure {@code out} is left as it was.
   *
   * @throws IllegalArgumentException if {@code out} is shorter than the batch
   */
  public void predict(Batch batch, float[] out) {
    Objects.requireNonNull(batch, "batch");
    Objects.requireNonNull(out, "out");
    if (out.length < batch.batchSize()) {
      throw new IllegalArgumentException(
          "out has " + out.length + " floats, fewer than the batch's " + batch.batchSize()
              + " samples");
    }
    run(pointer -> batch.predict(pointer, out));
  }

  /**
   * Log loss and ROC AUC over all samples of the given labelled batches.
   *
   * <p>Batches over arrays and over direct buffers can be mixed; in that case the array
   * batches are copied to native memory for the call.
   */
  public EvalResult evaluate(List<Batch> batches) {
    Objects.requireNonNull(batches, "batches");
    return call(pointer -> Batch.evaluate(batches, new Batch.Evaluator() {
      @Override
      public void arrays(long[] shapes, float[][] dense, float[][] labels, int[][] lengths,
          long[][] ids, float[][] weights, long numBatches, NativeEvalResult out) {
        DlrmNative.jdlrm_evaluate_arrays(
            pointer, shapes, dense, labels, lengths, ids, weights, numBatches, out);
      }

      @Override
      public void buffers(long[] shapes, ByteBuffer[] dense, ByteBuffer[] labels,
          ByteBuffer[] lengths, ByteBuffer[] ids, ByteBuffer[] weights, long numBatches,
          NativeEvalResult out) {
        DlrmNative.jdlrm_evaluate_buffers(
            pointer, shapes, dense, labels, lengths, ids, weights, numBatches, out);
      }
    }));
  }

  // ---- optimizer state ----------------------------------------------------------------

  /** Overrides the base learning rate of both optimizers (the config's schedule still scales it). */
  public void setLearningRate(float learningRate) {
    setLearningRate(LearningRateTarget.ALL, learningRate);
  }

  /** Overrides the base learning rate of the dense and/or sparse optimizer; saved in checkpoints. */
  public void setLearningRate(LearningRateTarget target, float learningRate) {
    Objects.requireNonNull(target, "target");
    run(pointer -> DlrmNative.jdlrm_set_learning_rate(pointer, target.code, learningRate));
  }

  /** Number of training steps taken (restored by {@link #load}). */
  public long step() {
    return call(DlrmNative::jdlrm_get_step);
  }

  /** The engine's config as protobuf text. */
  public String config() {
    return Utf8.decode(call(DlrmNative::jdlrm_get_config));
  }

  // ---- checkpoints --------------------------------------------------------------------

  /** Writes parameters, optimizer state, step and learning rates to a checkpoint, atomically. */
  public void save(Path checkpoint) {
    byte[] path = Utf8.path(checkpoint, "checkpoint");
    run(pointer -> DlrmNative.jdlrm_save(pointer, path));
  }

  /**
   * Writes a serving model with every table as it is: {@link #export(Path, ExportPrecision)}
   * with {@link ExportPrecision#FP32}.
   */
  public void export(Path path) {
    export(path, ExportPrecision.FP32);
  }

  /**
   * Writes a compact read-only model for serving, atomically: the config, step, dense
   * parameters, every table's rows (row-wise quantized as {@code quantize} says) and the ids
   * of each DYNAMIC table; no optimizer state. {@link #fromCheckpoint(Path)} loads it. An
   * engine loaded from an {@link ExportPrecision#INT8} or {@link ExportPrecision#INT4} model
   * predicts and evaluates from the codes directly, but its {@link #trainStep}, {@link
   * #submitTrainStep}, {@link #save}, {@link #load} and {@link #writeParameter} of a table
   * throw {@link DlrmException} with {@link StatusCode#FAILED_PRECONDITION} naming the table
   * ({@code model.tables[0] ("t0") has precision INT8}). Runs concurrently with predictions
   * (reader lock).
   *
   * @throws NullPointerException if {@code path} or {@code quantize} is null
   * @throws DlrmException {@code IO} if the file cannot be written, {@code
   *     FAILED_PRECONDITION} naming the table to export an already quantized table at the
   *     other quantized precision (with {@code FP32} it is written as it is)
   */
  public void export(Path path, ExportPrecision quantize) {
    export(path, quantize, DensePrecision.FP32);
  }

  /**
   * {@link #export(Path, ExportPrecision)} with the dense parameters written as {@code dense}
   * says: {@link DensePrecision#BF16} or {@link DensePrecision#FP16} rounds them to nearest in
   * 16 bits (half their bytes), and the loading engine predicts with those values.
   *
   * @throws NullPointerException if {@code path}, {@code quantize} or {@code dense} is null
   * @throws DlrmException as {@link #export(Path, ExportPrecision)}
   */
  public void export(Path path, ExportPrecision quantize, DensePrecision dense) {
    byte[] cPath = Utf8.path(path, "path");
    Objects.requireNonNull(quantize, "quantize");
    Objects.requireNonNull(dense, "dense");
    run(pointer -> DlrmNative.jdlrm_export(pointer, cPath, quantize.code | dense.code));
  }

  /**
   * Restores a checkpoint of an engine of the same model and optimizer kinds. The file is
   * read and verified before anything changes: on failure the engine is as it was.
   */
  public void load(Path checkpoint) {
    byte[] path = Utf8.path(checkpoint, "checkpoint");
    run(pointer -> DlrmNative.jdlrm_load(pointer, path));
  }

  // ---- parameters ---------------------------------------------------------------------

  /**
   * Names of all parameters, e.g. {@code bottom_mlp.0.weight}, {@code top_mlp.1.bias},
   * {@code embedding.<table>.weight}.
   */
  public List<String> parameterNames() {
    return call(pointer -> {
      long count = DlrmNative.jdlrm_parameter_count(pointer);
      List<String> names = new ArrayList<>((int) Math.min(count, 1 << 16));
      for (long i = 0; i < count; i++) {
        names.add(Utf8.decode(DlrmNative.jdlrm_parameter_name(pointer, i)));
      }
      return Collections.unmodifiableList(names);
    });
  }

  /**
   * Shape of a parameter, e.g. {@code [out, in]} for a weight matrix, {@code [rows, dim]} for
   * an embedding table.
   *
   * @throws DlrmException {@code NOT_FOUND} for an unknown name
   */
  public long[] parameterShape(String name) {
    byte[] cName = Utf8.cString(name, "name");
    long[] shape = new long[DlrmNative.DLRM_MAX_PARAMETER_DIMS];
    int ndim = call(pointer -> DlrmNative.jdlrm_parameter_shape(pointer, cName, shape));
    long[] result = new long[ndim];
    System.arraycopy(shape, 0, result, 0, ndim);
    return result;
  }

  /** A copy of a parameter's values, row-major. */
  public float[] readParameter(String name) {
    byte[] cName = Utf8.cString(name, "name");
    long size = 1;
    for (long dim : parameterShape(name)) {
      size *= dim;
    }
    if (size > Integer.MAX_VALUE - 8) {
      throw new IllegalArgumentException(
          "parameter " + name + " has " + size + " values, more than a Java array holds");
    }
    float[] values = new float[(int) size];
    run(pointer -> DlrmNative.jdlrm_read_parameter(pointer, cName, values));
    return values;
  }

  /**
   * Replaces a parameter's values (row-major, exactly its size, all finite); optimizer state
   * is kept. On failure nothing changes.
   */
  public void writeParameter(String name, float[] values) {
    byte[] cName = Utf8.cString(name, "name");
    Objects.requireNonNull(values, "values");
    run(pointer -> DlrmNative.jdlrm_write_parameter(pointer, cName, values));
  }

  // ---- table statistics ---------------------------------------------------------------

  /**
   * Statistics of the embedding table {@code table} (a {@code model.tables} name). Runs
   * concurrently with predictions.
   *
   * @throws DlrmException {@code NOT_FOUND}, naming it, if the model has no such table
   */
  public TableStats tableStats(String table) {
    byte[] cTable = Utf8.cString(table, "table");
    NativeTableStats out = new NativeTableStats();
    try {
      run(pointer -> DlrmNative.jdlrm_table_stats(pointer, cTable, out));
      return new TableStats(out.getDynamic() != 0, out.getCapacity(), out.getSize(),
          out.getLookups(), out.getHits(), out.getAdmitted(), out.getEvicted(),
          out.getRejected(), out.getMemory_bytes());
    } finally {
      out.delete();
    }
  }

  // ---- lifecycle ------------------------------------------------------------------------

  /** Destroys the native engine, after calls in flight return. Idempotent. */
  @Override
  public void close() {
    Lock write = lock.writeLock();
    write.lock();
    try {
      if (closed) {
        return;
      }
      closed = true;
      handle.closedByOwner = true;
      cleanable.clean();
    } finally {
      write.unlock();
    }
  }

  /** Whether {@link #close} was called. */
  public boolean isClosed() {
    Lock read = lock.readLock();
    read.lock();
    try {
      return closed;
    } finally {
      read.unlock();
    }
  }

  /** How many engines the Cleaner had to destroy because nobody closed them (for tests). */
  static long releasedByCleaner() {
    return RELEASED_BY_CLEANER.get();
  }

  /**
   * Runs {@code op} on the native handle under the read lock. The reachability fence keeps
   * this Engine, and so the handle, from being cleaned while the native call runs, even when
   * the caller drops its last reference to the engine during the call.
   */
  private <T> T call(Function<SWIGTYPE_p_dlrm_engine, T> op) {
    Lock read = lock.readLock();
    read.lock();
    try {
      if (closed) {
        throw new IllegalStateException("the Engine is closed");
      }
      return op.apply(handle.pointer);
    } finally {
      read.unlock();
      Reference.reachabilityFence(this);
    }
  }

  private void run(Consumer<SWIGTYPE_p_dlrm_engine> op) {
    call(pointer -> {
      op.accept(pointer);
      return null;
    });
  }
}
