package ai.dlrm.spark;

import java.io.Serializable;
import java.util.List;
import java.util.Objects;

/**
 * Which columns of a DataFrame feed the model: the label, the dense features and the sparse
 * features, each in the model config's order.
 *
 * <ul>
 *   <li>dense: any numeric column (float, double, int, long, ...); null is an error;
 *   <li>label: the same, or boolean; values in [0, 1];
 *   <li>sparse: {@code array<bigint>} or {@code array<int>}: a row's ids of that feature (a
 *       null array is an empty bag).
 * </ul>
 *
 * <p>Immutable and serializable: it travels to the executors with the training task.
 */
public final class FeatureColumns implements Serializable {
  private static final long serialVersionUID = 1L;

  private final String label;
  private final List<String> dense;
  private final List<String> sparse;

  /**
   * @param label the label column
   * @param dense the dense feature columns, in the model's order
   * @param sparse the sparse feature columns, in the model's order
   * @throws NullPointerException naming a null argument or list element
   * @throws IllegalArgumentException if sparse is empty
   */
  public FeatureColumns(String label, List<String> dense, List<String> sparse) {
    this.label = Objects.requireNonNull(label, "label");
    this.dense = List.copyOf(Objects.requireNonNull(dense, "dense"));
    this.sparse = List.copyOf(Objects.requireNonNull(sparse, "sparse"));
    if (this.sparse.isEmpty()) {
      throw new IllegalArgumentException("sparse: a DLRM model has at least one sparse feature");
    }
  }

  public String label() {
    return label;
  }

  /** Unmodifiable. */
  public List<String> dense() {
    return dense;
  }

  /** Unmodifiable. */
  public List<String> sparse() {
    return sparse;
  }

  @Override
  public String toString() {
    return "FeatureColumns{label=" + label + ", dense=" + dense + ", sparse=" + sparse + "}";
  }
}
