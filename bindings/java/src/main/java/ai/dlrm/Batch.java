package ai.dlrm;

import ai.dlrm.internal.DlrmNative;
import ai.dlrm.internal.NativeEvalResult;
import ai.dlrm.internal.SWIGTYPE_p_dlrm_arrow_batch;
import ai.dlrm.internal.SWIGTYPE_p_dlrm_engine;
import ai.dlrm.internal.SWIGTYPE_p_jdlrm_trainer;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import java.util.Objects;

/**
 * One batch of samples in the engine's layout (that of TorchRec's KeyedJaggedTensor):
 *
 * <ul>
 *   <li>{@code dense}: float32 {@code [batchSize x numDense]}, row-major;
 *   <li>{@code labels}: float32 {@code [batchSize]} in [0, 1]; optional for prediction;
 *   <li>{@code lengths}: int32 {@code [numSparse x batchSize]}, feature-major (all bags of
 *       feature 0, then feature 1, ...);
 *   <li>{@code ids}: int64 {@code [sum(lengths)]}, in the same order;
 *   <li>{@code weights}: float32 per id, optional (all 1).
 * </ul>
 *
 * <p>A batch is a view, not a copy: it refers to the caller's arrays ({@link #builder()}) or
 * direct buffers ({@link #directBuilder()}), so later writes to them are seen by later calls.
 * The engine reads them only during a call and never keeps them, so reusing one set of arrays
 * for batch after batch is the intended, allocation-free pattern. For the duration of a call
 * the JVM pins array elements or (HotSpot does) copies them; direct buffers are read in place,
 * so they are the zero-copy path for large batches, e.g. filled by a feature pipeline
 * off-heap. Only {@link #fromArrow} copies: its batch holds the Arrow columns' values in
 * direct buffers of its own.
 *
 * <p>The counts ({@code numDense}, {@code numSparse}, {@code numIds}) are derived from the
 * sizes given, so they always match the memory handed to the engine; a batch whose counts do
 * not fit the model (say 2 dense features for a model of 3) is refused by the engine with a
 * {@link DlrmException} naming the field. Ids out of range, NaN values and negative lengths
 * are likewise the engine's to check: it validates every field before changing anything.
 */
public final class Batch {
  private final Shape shape;
  private final Columns columns;

  private Batch(Shape shape, Columns columns) {
    this.shape = shape;
    this.columns = columns;
  }

  /** A builder of a batch over Java arrays. */
  public static ArrayBuilder builder() {
    return new ArrayBuilder();
  }

  /**
   * A builder of a batch over direct {@link ByteBuffer}s in native byte order, read from
   * position to limit. Nothing is copied: the engine reads the buffers' memory directly.
   */
  public static DirectBuilder directBuilder() {
    return new DirectBuilder();
  }

  /**
   * A batch copied from Arrow columns: the struct array of a record batch exported through the
   * Arrow C Data Interface, each row a sample. With Arrow Java ({@code org.apache.arrow.c}):
   *
   * <pre>{@code
   * try (ArrowSchema schema = ArrowSchema.allocateNew(allocator);
   *     ArrowArray array = ArrowArray.allocateNew(allocator)) {
   *   Data.exportVectorSchemaRoot(allocator, root, null, array, schema);
   *   try {
   *     batch = Batch.fromArrow(schema.memoryAddress(), array.memoryAddress(), columns);
   *   } finally {
   *     array.release();
   *     schema.release();
   *   }
   * }
   * }</pre>
   *
   * <p>The schema and array are borrowed for the call: read, never released nor kept, so the
   * caller still releases them (and may do so as soon as this returns) and must not change
   * them meanwhile. The result is a copy in the engine's layout over direct buffers of its
   * own ({@link #isDirect()}); it works with every {@link Engine} and {@link
   * DistributedTrainer} call. Values (ids in their table's range, finite numbers, labels in
   * [0, 1]) are checked when the batch is used, as any batch's are.
   *
   * @param schemaAddress the address of a {@code struct ArrowSchema} of format {@code +s}
   * @param arrayAddress the address of the {@code struct ArrowArray} it describes
   * @param columns which column is which
   * @throws IllegalArgumentException for a zero address, a batch without rows, or one too large
   *     for direct buffers
   * @throws NullPointerException if {@code columns} is null
   * @throws DlrmException {@code INVALID_ARGUMENT} naming the column, and the row where one is
   *     at fault: a missing column, an unsupported type, a null value, a malformed array, weights
   *     whose lengths differ from their ids'
   */
  public static Batch fromArrow(long schemaAddress, long arrayAddress, ArrowColumns columns) {
    if (schemaAddress == 0) {
      throw new IllegalArgumentException("schemaAddress is 0: pass ArrowSchema.memoryAddress()");
    }
    if (arrayAddress == 0) {
      throw new IllegalArgumentException("arrayAddress is 0: pass ArrowArray.memoryAddress()");
    }
    Objects.requireNonNull(columns, "columns");
    NativeLoader.load();
    SWIGTYPE_p_dlrm_arrow_batch handle = DlrmNative.jdlrm_arrow_batch_create(schemaAddress,
        arrayAddress, columns.cLabel, columns.cDense, columns.cSparse, columns.cWeights);
    if (handle == null) { // the wrapper throws on failure; this is a safety net
      throw new IllegalStateException("libdlrm returned no Arrow batch");
    }
    try {
      return copyOf(handle);
    } finally {
      DlrmNative.dlrm_arrow_batch_destroy(handle);
    }
  }

  /** A batch over direct buffers holding a copy of an Arrow batch handle's arrays. */
  private static Batch copyOf(SWIGTYPE_p_dlrm_arrow_batch handle) {
    long[] counts = new long[6]; // batch_size, num_dense, num_sparse, num_ids, labels, weights
    DlrmNative.jdlrm_arrow_batch_shape(handle, counts);
    if (counts[0] == 0) {
      throw new IllegalArgumentException("the Arrow array has no rows; a batch needs one");
    }
    Shape shape = new Shape(Buffers.elements(counts[0], Float.BYTES, "rows"), (int) counts[1],
        (int) counts[2], Buffers.elements(counts[3], Long.BYTES, "ids"));
    // Every column's byte count fits one direct buffer (and the int products below).
    Buffers.elements((long) shape.batchSize * shape.numDense, Float.BYTES, "dense values");
    Buffers.elements((long) shape.batchSize * shape.numSparse, Integer.BYTES, "bags");
    ByteBuffer dense = copyColumn(handle, DlrmNative.JDLRM_ARROW_DENSE,
        shape.batchSize * shape.numDense, Float.BYTES);
    ByteBuffer labels = counts[4] == 0 ? null
        : copyColumn(handle, DlrmNative.JDLRM_ARROW_LABELS, shape.batchSize, Float.BYTES);
    ByteBuffer lengths = copyColumn(handle, DlrmNative.JDLRM_ARROW_LENGTHS,
        shape.batchSize * shape.numSparse, Integer.BYTES);
    ByteBuffer ids = copyColumn(handle, DlrmNative.JDLRM_ARROW_IDS, shape.numIds, Long.BYTES);
    ByteBuffer weights = counts[5] == 0 ? null
        : copyColumn(handle, DlrmNative.JDLRM_ARROW_WEIGHTS, shape.numIds, Float.BYTES);
    return new Batch(shape, new DirectColumns(dense, labels, lengths, ids, weights));
  }

  private static ByteBuffer copyColumn(SWIGTYPE_p_dlrm_arrow_batch handle, int column,
      int elements, int elementSize) {
    ByteBuffer buffer = Buffers.allocate(elements, elementSize);
    DlrmNative.jdlrm_arrow_batch_copy(handle, column, buffer);
    return buffer;
  }

  /** Number of samples. */
  public int batchSize() {
    return shape.batchSize;
  }

  /** Number of dense features per sample. */
  public int numDense() {
    return shape.numDense;
  }

  /** Number of sparse (categorical) features per sample. */
  public int numSparse() {
    return shape.numSparse;
  }

  /** Number of ids over all bags. */
  public int numIds() {
    return shape.numIds;
  }

  /** Whether the batch has labels (training and evaluation need them). */
  public boolean hasLabels() {
    return columns.hasLabels();
  }

  /** Whether the batch is over direct buffers rather than arrays. */
  public boolean isDirect() {
    return columns instanceof DirectColumns;
  }

  @Override
  public String toString() {
    return "Batch[batchSize=" + shape.batchSize + ", numDense=" + shape.numDense
        + ", numSparse=" + shape.numSparse + ", numIds=" + shape.numIds
        + (hasLabels() ? "" : ", no labels") + (isDirect() ? ", direct" : "") + "]";
  }

  // ---- calls into the engine (the Engine holds its lock around these) -----------------

  float trainStep(SWIGTYPE_p_dlrm_engine engine) {
    Shape s = shape;
    if (columns instanceof ArrayColumns a) {
      return DlrmNative.jdlrm_train_step_arrays(engine, s.batchSize, s.numDense, s.numSparse,
          a.dense, a.labels, a.lengths, a.ids, s.numIds, a.weights);
    }
    DirectColumns d = (DirectColumns) columns;
    return DlrmNative.jdlrm_train_step_buffers(engine, s.batchSize, s.numDense, s.numSparse,
        d.dense, d.labels, d.lengths, d.ids, s.numIds, d.weights);
  }

  long trainSubmit(SWIGTYPE_p_dlrm_engine engine) {
    Shape s = shape;
    if (columns instanceof ArrayColumns a) {
      return DlrmNative.jdlrm_train_submit_arrays(engine, s.batchSize, s.numDense, s.numSparse,
          a.dense, a.labels, a.lengths, a.ids, s.numIds, a.weights);
    }
    DirectColumns d = (DirectColumns) columns;
    return DlrmNative.jdlrm_train_submit_buffers(engine, s.batchSize, s.numDense, s.numSparse,
        d.dense, d.labels, d.lengths, d.ids, s.numIds, d.weights);
  }

  void predict(SWIGTYPE_p_dlrm_engine engine, float[] out) {
    Shape s = shape;
    if (columns instanceof ArrayColumns a) {
      DlrmNative.jdlrm_predict_arrays(engine, s.batchSize, s.numDense, s.numSparse, a.dense,
          a.labels, a.lengths, a.ids, s.numIds, a.weights, out);
      return;
    }
    DirectColumns d = (DirectColumns) columns;
    DlrmNative.jdlrm_predict_buffers(engine, s.batchSize, s.numDense, s.numSparse, d.dense,
        d.labels, d.lengths, d.ids, s.numIds, d.weights, out);
  }

  /** Queues this batch as a trainer's part of the next global batch (the engine copies it). */
  void enqueue(SWIGTYPE_p_jdlrm_trainer trainer) {
    Shape s = shape;
    if (columns instanceof ArrayColumns a) {
      DlrmNative.jdlrm_trainer_enqueue_arrays(trainer, s.batchSize, s.numDense, s.numSparse,
          a.dense, a.labels, a.lengths, a.ids, s.numIds, a.weights);
      return;
    }
    DirectColumns d = (DirectColumns) columns;
    DlrmNative.jdlrm_trainer_enqueue_buffers(trainer, s.batchSize, s.numDense, s.numSparse,
        d.dense, d.labels, d.lengths, d.ids, s.numIds, d.weights);
  }

  /** One native evaluate call (of an engine or a trainer) over arrays or direct buffers. */
  interface Evaluator {
    void arrays(long[] shapes, float[][] dense, float[][] labels, int[][] lengths, long[][] ids,
        float[][] weights, long numBatches, NativeEvalResult out);

    void buffers(long[] shapes, ByteBuffer[] dense, ByteBuffer[] labels, ByteBuffer[] lengths,
        ByteBuffer[] ids, ByteBuffer[] weights, long numBatches, NativeEvalResult out);
  }

  /**
   * Evaluates {@code batches} with one native call. Batches over arrays and over direct
   * buffers can be mixed; in that case the array batches are copied to native memory.
   */
  static EvalResult evaluate(List<Batch> batches, Evaluator evaluator) {
    Objects.requireNonNull(batches, "batches");
    Batch[] list = batches.toArray(new Batch[0]);
    int n = list.length;
    long[] shapes = new long[4 * n];
    boolean allArrays = true;
    for (int i = 0; i < n; i++) {
      Objects.requireNonNull(list[i], "batches[" + i + "]");
      list[i].writeShape(shapes, i);
      allArrays &= !list[i].isDirect();
    }
    NativeEvalResult result = new NativeEvalResult();
    try {
      if (allArrays) {
        float[][] dense = new float[n][];
        float[][] labels = new float[n][];
        int[][] lengths = new int[n][];
        long[][] ids = new long[n][];
        float[][] weights = new float[n][];
        for (int i = 0; i < n; i++) {
          ArrayColumns a = list[i].arrays();
          dense[i] = a.dense;
          labels[i] = a.labels;
          lengths[i] = a.lengths;
          ids[i] = a.ids;
          weights[i] = a.weights;
        }
        evaluator.arrays(shapes, dense, labels, lengths, ids, weights, n, result);
      } else {
        ByteBuffer[] dense = new ByteBuffer[n];
        ByteBuffer[] labels = new ByteBuffer[n];
        ByteBuffer[] lengths = new ByteBuffer[n];
        ByteBuffer[] ids = new ByteBuffer[n];
        ByteBuffer[] weights = new ByteBuffer[n];
        for (int i = 0; i < n; i++) {
          DirectColumns d = list[i].buffers();
          dense[i] = d.dense;
          labels[i] = d.labels;
          lengths[i] = d.lengths;
          ids[i] = d.ids;
          weights[i] = d.weights;
        }
        evaluator.buffers(shapes, dense, labels, lengths, ids, weights, n, result);
      }
      return new EvalResult(result.getLog_loss(), result.getAuc(), result.getNum_samples());
    } finally {
      result.delete();
    }
  }

  /** The shape as evaluate() passes it: batch_size, num_dense, num_sparse, num_ids. */
  void writeShape(long[] shapes, int index) {
    shapes[4 * index] = shape.batchSize;
    shapes[4 * index + 1] = shape.numDense;
    shapes[4 * index + 2] = shape.numSparse;
    shapes[4 * index + 3] = shape.numIds;
  }

  ArrayColumns arrays() {
    return (ArrayColumns) columns;
  }

  /** The columns as direct buffers: the batch's own, or native copies of its arrays. */
  DirectColumns buffers() {
    if (columns instanceof DirectColumns d) {
      return d;
    }
    ArrayColumns a = (ArrayColumns) columns;
    return new DirectColumns(Buffers.copyOf(a.dense), Buffers.copyOf(a.labels),
        Buffers.copyOf(a.lengths), Buffers.copyOf(a.ids), Buffers.copyOf(a.weights));
  }

  // ---- storage ----------------------------------------------------------------------

  private record Shape(int batchSize, int numDense, int numSparse, int numIds) {
    /**
     * Derives the counts from element counts (-1 for an absent optional column), checking
     * only what must hold for the memory to match the counts.
     */
    static Shape derive(Integer batchSize, int dense, int labels, int lengths, int ids,
        int weights) {
      int b;
      if (batchSize != null) {
        b = batchSize;
        if (labels >= 0 && labels != b) {
          throw new IllegalArgumentException(
              "labels has " + labels + " values but batchSize is " + b);
        }
      } else if (labels >= 0) {
        b = labels;
      } else {
        throw new IllegalArgumentException("batchSize is unknown: set it, or give labels");
      }
      if (b <= 0) {
        throw new IllegalArgumentException("batchSize must be positive, got " + b);
      }
      if (dense % b != 0) {
        throw new IllegalArgumentException(
            "dense has " + dense + " values, not a multiple of batchSize " + b);
      }
      if (lengths % b != 0) {
        throw new IllegalArgumentException(
            "lengths has " + lengths + " values, not a multiple of batchSize " + b);
      }
      if (weights >= 0 && weights != ids) {
        throw new IllegalArgumentException(
            "weights has " + weights + " values but ids has " + ids + "; give one weight per id");
      }
      return new Shape(b, dense / b, lengths / b, ids);
    }
  }

  private interface Columns {
    boolean hasLabels();
  }

  /** Columns over Java arrays (labels and weights may be null). */
  static final class ArrayColumns implements Columns {
    final float[] dense;
    final float[] labels;
    final int[] lengths;
    final long[] ids;
    final float[] weights;

    ArrayColumns(float[] dense, float[] labels, int[] lengths, long[] ids, float[] weights) {
      this.dense = dense;
      this.labels = labels;
      this.lengths = lengths;
      this.ids = ids;
      this.weights = weights;
    }

    @Override
    public boolean hasLabels() {
      return labels != null;
    }
  }

  /** Columns over direct buffers, each a slice starting at the caller's position. */
  static final class DirectColumns implements Columns {
    final ByteBuffer dense;
    final ByteBuffer labels;
    final ByteBuffer lengths;
    final ByteBuffer ids;
    final ByteBuffer weights;

    DirectColumns(ByteBuffer dense, ByteBuffer labels, ByteBuffer lengths, ByteBuffer ids,
        ByteBuffer weights) {
      this.dense = dense;
      this.labels = labels;
      this.lengths = lengths;
      this.ids = ids;
      this.weights = weights;
    }

    @Override
    public boolean hasLabels() {
      return labels != null;
    }
  }

  // ---- builders ---------------------------------------------------------------------

  /** Builds a {@link Batch} over Java arrays; the arrays are referenced, not copied. */
  public static final class ArrayBuilder {
    private Integer batchSize;
    private float[] dense;
    private float[] labels;
    private int[] lengths;
    private long[] ids;
    private float[] weights;

    private ArrayBuilder() {}

    /** Number of samples; needed only when there are no labels. */
    public ArrayBuilder batchSize(int batchSize) {
      this.batchSize = batchSize;
      return this;
    }

    /** Dense features, {@code [batchSize x numDense]} row-major. */
    public ArrayBuilder dense(float[] dense) {
      this.dense = dense;
      return this;
    }

    /** Labels in [0, 1], one per sample; null for none. */
    public ArrayBuilder labels(float[] labels) {
      this.labels = labels;
      return this;
    }

    /** Bag lengths, {@code [numSparse x batchSize]} feature-major. */
    public ArrayBuilder lengths(int[] lengths) {
      this.lengths = lengths;
      return this;
    }

    /** Ids of all bags, in the order of {@code lengths}. */
    public ArrayBuilder ids(long[] ids) {
      this.ids = ids;
      return this;
    }

    /** One weight per id; null for all 1. */
    public ArrayBuilder weights(float[] weights) {
      this.weights = weights;
      return this;
    }

    /**
     * The batch.
     *
     * @throws IllegalArgumentException naming the argument, if a required array is missing or
     *     the sizes cannot describe one batch
     */
    public Batch build() {
      require(dense, "dense");
      require(lengths, "lengths");
      require(ids, "ids");
      Shape shape = Shape.derive(batchSize, dense.length, labels == null ? -1 : labels.length,
          lengths.length, ids.length, weights == null ? -1 : weights.length);
      return new Batch(shape, new ArrayColumns(dense, labels, lengths, ids, weights));
    }
  }

  /**
   * Builds a {@link Batch} over direct buffers. Each buffer must be direct, in native byte
   * order ({@code buffer.order(ByteOrder.nativeOrder())}, which is how the engine reads the
   * bytes) and aligned to its element size; its content is position to limit.
   */
  public static final class DirectBuilder {
    private Integer batchSize;
    private ByteBuffer dense;
    private ByteBuffer labels;
    private ByteBuffer lengths;
    private ByteBuffer ids;
    private ByteBuffer weights;

    private DirectBuilder() {}

    /** Number of samples; needed only when there are no labels. */
    public DirectBuilder batchSize(int batchSize) {
      this.batchSize = batchSize;
      return this;
    }

    /** Dense features: float32 {@code [batchSize x numDense]} row-major. */
    public DirectBuilder dense(ByteBuffer dense) {
      this.dense = dense;
      return this;
    }

    /** Labels: float32, one per sample; null for none. */
    public DirectBuilder labels(ByteBuffer labels) {
      this.labels = labels;
      return this;
    }

    /** Bag lengths: int32 {@code [numSparse x batchSize]} feature-major. */
    public DirectBuilder lengths(ByteBuffer lengths) {
      this.lengths = lengths;
      return this;
    }

    /** Ids: int64, in the order of {@code lengths}. */
    public DirectBuilder ids(ByteBuffer ids) {
      this.ids = ids;
      return this;
    }

    /** Weights: float32, one per id; null for all 1. */
    public DirectBuilder weights(ByteBuffer weights) {
      this.weights = weights;
      return this;
    }

    /**
     * The batch.
     *
     * @throws IllegalArgumentException naming the argument, if a buffer is missing, not direct,
     *     not in native order, misaligned, or the sizes cannot describe one batch
     */
    public Batch build() {
      ByteBuffer d = Buffers.view(require(dense, "dense"), Float.BYTES, "dense");
      ByteBuffer l = labels == null ? null : Buffers.view(labels, Float.BYTES, "labels");
      ByteBuffer n = Buffers.view(require(lengths, "lengths"), Integer.BYTES, "lengths");
      ByteBuffer i = Buffers.view(require(ids, "ids"), Long.BYTES, "ids");
      ByteBuffer w = weights == null ? null : Buffers.view(weights, Float.BYTES, "weights");
      Shape shape = Shape.derive(batchSize, d.capacity() / Float.BYTES,
          l == null ? -1 : l.capacity() / Float.BYTES, n.capacity() / Integer.BYTES,
          i.capacity() / Long.BYTES, w == null ? -1 : w.capacity() / Float.BYTES);
      return new Batch(shape, new DirectColumns(d, l, n, i, w));
    }
  }

  private static <T> T require(T value, String argument) {
    if (value == null) {
      throw new IllegalArgumentException(argument + " is required");
    }
    return value;
  }

  /** Direct-buffer checks and copies. */
  static final class Buffers {
    private Buffers() {}

    /** A slice of position..limit, after checking what the engine cannot check itself. */
    static ByteBuffer view(ByteBuffer buffer, int elementSize, String argument) {
      if (!buffer.isDirect()) {
        throw new IllegalArgumentException(argument
            + " must be a direct ByteBuffer (ByteBuffer.allocateDirect): the engine reads its"
            + " memory in place");
      }
      if (buffer.order() != ByteOrder.nativeOrder()) {
        throw new IllegalArgumentException(argument + " is in " + buffer.order()
            + " byte order; the engine reads native order (" + ByteOrder.nativeOrder()
            + "): set buffer.order(ByteOrder.nativeOrder())");
      }
      if (buffer.remaining() % elementSize != 0) {
        throw new IllegalArgumentException(argument + " has " + buffer.remaining()
            + " bytes, not a multiple of the element size " + elementSize);
      }
      if (buffer.alignmentOffset(buffer.position(), elementSize) != 0) {
        throw new IllegalArgumentException(
            argument + " is not aligned to " + elementSize + " bytes at its position");
      }
      return buffer.slice();
    }

    /**
     * {@code count} as the element count of one direct buffer, which holds at most {@code
     * Integer.MAX_VALUE} bytes.
     */
    static int elements(long count, int elementSize, String what) {
      if (count > Integer.MAX_VALUE / elementSize) {
        throw new IllegalArgumentException("the Arrow array has " + count + " " + what
            + ", more than a direct buffer holds (" + Integer.MAX_VALUE / elementSize
            + "); split it into smaller record batches");
      }
      return (int) count;
    }

    static ByteBuffer allocate(int elements, int elementSize) {
      return ByteBuffer.allocateDirect(Math.multiplyExact(elements, elementSize))
          .order(ByteOrder.nativeOrder());
    }

    static ByteBuffer copyOf(float[] values) {
      if (values == null) {
        return null;
      }
      ByteBuffer buffer = allocate(values.length, Float.BYTES);
      buffer.asFloatBuffer().put(values);
      return buffer;
    }

    static ByteBuffer copyOf(int[] values) {
      ByteBuffer buffer = allocate(values.length, Integer.BYTES);
      buffer.asIntBuffer().put(values);
      return buffer;
    }

    static ByteBuffer copyOf(long[] values) {
      ByteBuffer buffer = allocate(values.length, Long.BYTES);
      buffer.asLongBuffer().put(values);
      return buffer;
    }
  }
}
