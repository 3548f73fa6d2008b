package ai.dlrm;

/**
 * How an embedding table is used: {@link Engine#tableStats}. A DYNAMIC table gives rows to
 * the raw {@code long} ids it admits and evicts ids when full; a FIXED table reports its rows
 * as capacity and size and counts nothing. The counters run from the engine's creation and
 * are saved in checkpoints.
 *
 * @param dynamic {@code true} for a DYNAMIC table, {@code false} for a FIXED one
 * @param capacity rows ids may hold (a DYNAMIC table's rows less its default row)
 * @param size rows held by ids now
 * @param lookups id occurrences trained on
 * @param hits of those, occurrences of ids that held a row
 * @param admitted ids given a row
 * @param evicted ids that lost their row (to make room, or past their TTL)
 * @param rejected new ids that qualified for a row at a step and found none
 * @param memoryBytes weights, sparse optimizer state and the id index
 */
public record TableStats(boolean dynamic, long capacity, long size, long lookups, long hits,
    long admitted, long evicted, long rejected, long memoryBytes) {
  /** {@code hits / lookups}, 0 before any lookup. */
  public double hitRate() {
    return lookups == 0 ? 0.0 : (double) hits / lookups;
  }
}
