package ai.dlrm.spark;

import ai.dlrm.Batch;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Iterator;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.StructType;

/**
 * Cuts an iterator of DataFrame rows into batches of {@code rows} samples in the engine's
 * layout (dense row-major, lengths and ids feature-major); a trailing partial batch is
 * dropped, as every trainer's parts must be the same size. The same rows always give the
 * same batches, in the driver as in a task, which is what makes a Spark job comparable to
 * one process.
 *
 * <p>Errors name the column and the row (counted from 0 in this iterator): a missing column,
 * a non-numeric dense value, a null, an id that is not an integer.
 */
public final class RowBatcher {
  private final FeatureColumns columns;
  private final int rows;

  /** Batches of {@code rows} samples; rows must be positive. */
  public RowBatcher(FeatureColumns columns, int rows) {
    if (rows <= 0) {
      throw new IllegalArgumentException("rows per batch must be positive, got " + rows);
    }
    this.columns = columns;
    this.rows = rows;
  }

  /** Every full batch of the iterator's rows, in order. */
  public List<Batch> batches(Iterator<Row> it) {
    List<Batch> out = new ArrayList<>();
    List<Row> pending = new ArrayList<>(rows);
    long first = 0;
    while (it.hasNext()) {
      pending.add(it.next());
      if (pending.size() == rows) {
        out.add(batch(pending, first));
        first += rows;
        pending.clear();
      }
    }
    return out;
  }

  /** One batch of the given rows; rowNumber is the first's number, for messages. */
  public Batch batch(List<Row> part, long rowNumber) {
    int n = part.size();
    int nd = columns.dense().size();
    int nf = columns.sparse().size();
    int[] denseIndex = indexes(part.get(0).schema(), columns.dense());
    int labelIndex = indexes(part.get(0).schema(), List.of(columns.label()))[0];
    float[] dense = new float[n * nd];
    float[] labels = new float[n];
    for (int r = 0; r < n; r++) {
      Row row = part.get(r);
      for (int j = 0; j < nd; j++) {
        dense[r * nd + j] = number(row, denseIndex[j], columns.dense().get(j), rowNumber + r);
      }
      labels[r] = number(row, labelIndex, columns.label(), rowNumber + r);
    }
    int[] lengths = new int[nf * n];
    long[] ids = sparse(part, rowNumber, lengths);
    return Batch.builder().dense(dense).labels(labels).lengths(lengths).ids(ids).build();
  }

  /** The ids of every sparse feature, feature-major, with their bag sizes into lengths. */
  private long[] sparse(List<Row> part, long rowNumber, int[] lengths) {
    int n = part.size();
    int[] index = indexes(part.get(0).schema(), columns.sparse());
    long[] ids = new long[16];
    int count = 0;
    for (int f = 0; f < index.length; f++) {
      for (int r = 0; r < n; r++) {
        Row row = part.get(r);
        List<Object> bag = row.isNullAt(index[f]) ? List.of() : row.getList(index[f]);
        lengths[f * n + r] = bag.size();
        if (count + bag.size() > ids.length) {
          ids = Arrays.copyOf(ids, Math.max(2 * ids.length, count + bag.size()));
        }
        for (int k = 0; k < bag.size(); k++) {
          ids[count++] = id(bag.get(k), columns.sparse().get(f), rowNumber + r, k);
        }
      }
    }
    return Arrays.copyOf(ids, count);
  }

  private static int[] indexes(StructType schema, List<String> names) {
    int[] out = new int[names.size()];
    for (int i = 0; i < out.length; i++) {
      String name = names.get(i);
      if (!Arrays.asList(schema.fieldNames()).contains(name)) {
        throw new IllegalArgumentException("column \"" + name + "\" is not in the DataFrame "
            + "(columns: " + String.join(", ", schema.fieldNames()) + ")");
      }
      out[i] = schema.fieldIndex(name);
    }
    return out;
  }

  private static float number(Row row, int index, String column, long rowNumber) {
    if (row.isNullAt(index)) {
      throw new IllegalArgumentException("column \"" + column + "\", row " + rowNumber
          + ": null");
    }
    Object value = row.get(index);
    if (value instanceof Number number) {
      return number.floatValue();
    }
    if (value instanceof Boolean b) {
      return b ? 1f : 0f;
    }
    throw new IllegalArgumentException("column \"" + column + "\", row " + rowNumber
        + ": expected a number, got " + value.getClass().getSimpleName());
  }

  private static long id(Object value, String column, long rowNumber, int k) {
    if (value instanceof Long || value instanceof Integer || value instanceof Short) {
      return ((Number) value).longValue();
    }
    throw new IllegalArgumentException("column \"" + column + "\", row " + rowNumber + ": id "
        + k + " is " + (value == null ? "null" : "a " + value.getClass().getSimpleName())
        + ", not an integer");
  }
}
