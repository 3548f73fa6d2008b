package ai.dlrm;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Objects;

/**
 * Which columns of an Arrow record batch are which, by name, for {@link Batch#fromArrow}:
 *
 * <ul>
 *   <li>{@code label}: the label column (float32, float64, int32, int64 or bool), or none for a
 *       batch to predict;
 *   <li>{@code dense}: the model's dense features, in the model's order (float32, float64,
 *       int32 or int64 columns);
 *   <li>{@code sparse}: the model's sparse features, in the model's order ({@code list} or
 *       {@code large_list} of int64 or int32 ids: a row's bag; a null list is an empty bag);
 *   <li>{@code weights}: none, or one name per sparse feature, {@code null} for an unweighted
 *       one: a {@code list<float32|float64>} with the same lengths as its sparse column.
 * </ul>
 *
 * <p>Immutable; built by {@link #builder()}. The names are checked here (none null, empty or
 * holding a NUL character, one weights entry per sparse feature); whether the columns exist
 * and have a usable type is checked by {@link Batch#fromArrow}.
 */
public final class ArrowColumns {
  private final String label;
  private final List<String> dense;
  private final List<String> sparse;
  private final List<String> weights;
  // The names as NUL-terminated UTF-8, as the native call takes them.
  final byte[] cLabel;
  final byte[][] cDense;
  final byte[][] cSparse;
  final byte[][] cWeights;

  private ArrowColumns(Builder b) {
    label = b.label;
    dense = Collections.unmodifiableList(new ArrayList<>(b.dense));
    sparse = Collections.unmodifiableList(new ArrayList<>(b.sparse));
    weights = b.weights == null ? null : Collections.unmodifiableList(new ArrayList<>(b.weights));
    cLabel = label == null ? null : encode(label, "label");
    cDense = encodeAll(dense, "dense", false);
    cSparse = encodeAll(sparse, "sparse", false);
    cWeights = weights == null ? null : encodeAll(weights, "weights", true);
    if (weights != null && weights.size() != sparse.size()) {
      throw new IllegalArgumentException("weights names " + weights.size()
          + " columns but sparse names " + sparse.size()
          + "; give one per sparse feature (null for an unweighted one)");
    }
  }

  /** A builder; only the names given are set (no label, no dense, no sparse, no weights). */
  public static Builder builder() {
    return new Builder();
  }

  /** The label column, or {@code null} for none. */
  public String label() {
    return label;
  }

  /** The dense feature columns, in the model's order (unmodifiable). */
  public List<String> dense() {
    return dense;
  }

  /** The sparse feature columns, in the model's order (unmodifiable). */
  public List<String> sparse() {
    return sparse;
  }

  /**
   * The weights column of each sparse feature ({@code null} entries: unweighted), or {@code
   * null} when no feature is weighted (unmodifiable).
   */
  public List<String> weights() {
    return weights;
  }

  @Override
  public boolean equals(Object other) {
    return other instanceof ArrowColumns c && Objects.equals(label, c.label)
        && dense.equals(c.dense) && sparse.equals(c.sparse) && Objects.equals(weights, c.weights);
  }

  @Override
  public int hashCode() {
    return Objects.hash(label, dense, sparse, weights);
  }

  @Override
  public String toString() {
    return "ArrowColumns[label=" + label + ", dense=" + dense + ", sparse=" + sparse
        + (weights == null ? "" : ", weights=" + weights) + "]";
  }

  private static byte[] encode(String name, String argument) {
    if (name.isEmpty()) {
      throw new IllegalArgumentException(argument + " is empty; name a column"
          + (argument.equals("label") ? ", or give null for no labels" : ""));
    }
    return Utf8.cString(name, argument);
  }

  private static byte[][] encodeAll(List<String> names, String argument, boolean nullable) {
    byte[][] out = new byte[names.size()][];
    for (int i = 0; i < out.length; i++) {
      String name = names.get(i);
      String element = argument + "[" + i + "]";
      if (name == null && !nullable) {
        throw new NullPointerException(element);
      }
      out[i] = name == null ? null : encode(name, element);
    }
    return out;
  }

  /** Builds {@link ArrowColumns}; each setter replaces what an earlier call set. */
  public static final class Builder {
    private String label;
    private List<String> dense = List.of();
    private List<String> sparse = List.of();
    private List<String> weights;

    private Builder() {}

    /** The label column; {@code null} (the default) for a batch without labels. */
    public Builder label(String label) {
      this.label = label;
      return this;
    }

    /** The dense feature columns, in the model's order. */
    public Builder dense(String... names) {
      return dense(Arrays.asList(Objects.requireNonNull(names, "dense")));
    }

    /** The dense feature columns, in the model's order. */
    public Builder dense(List<String> names) {
      this.dense = new ArrayList<>(Objects.requireNonNull(names, "dense"));
      return this;
    }

    /** The sparse feature columns, in the model's order. */
    public Builder sparse(String... names) {
      return sparse(Arrays.asList(Objects.requireNonNull(names, "sparse")));
    }

    /** The sparse feature columns, in the model's order. */
    public Builder sparse(List<String> names) {
      this.sparse = new ArrayList<>(Objects.requireNonNull(names, "sparse"));
      return this;
    }

    /**
     * The weights column of each sparse feature, in the order of {@link #sparse}: {@code null}
     * entries for unweighted features; a {@code null} array (the default) for none.
     */
    public Builder weights(String... names) {
      return weights(names == null ? null : Arrays.asList(names));
    }

    /** As {@link #weights(String...)}. */
    public Builder weights(List<String> names) {
      this.weights = names == null ? null : new ArrayList<>(names);
      return this;
    }

    /**
     * The mapping.
     *
     * @throws NullPointerException naming the element, for a null dense or sparse name
     * @throws IllegalArgumentException naming the argument, for an empty name, a name holding
     *     a NUL character, or weights not naming one column per sparse feature
     */
    public ArrowColumns build() {
      return new ArrowColumns(this);
    }
  }
}
