package ai.dlrm.spark;

import java.io.Serializable;

/**
 * How {@link SparkTrainer#fit} runs a job: one trainer per partition of the DataFrame,
 * {@code servers} embedding servers on the driver, parts of {@code partRows} rows.
 *
 * @param partRows rows of each trainer's part of a global batch: the config's {@code
 *     reduction_chunk_rows} times a power of two (the engine checks); a global batch is
 *     {@code partRows x partitions} rows
 * @param servers embedding servers, run as threads of the driver; 0: the trainers own the
 *     embedding shards (sync only), so the tables live in the executors, not the driver
 * @param holdoutParts the last this many parts of every partition are not trained on but
 *     evaluated after training (0: no evaluation)
 * @param checkpointDir where to write the sharded checkpoint of the last step (null: none);
 *     a path the driver and every executor see (the servers write their shards from the
 *     driver, trainer 0 the dense state and the manifest from its executor)
 * @param timeoutMs every wait of the job ({@code DLRM_TIMEOUT_MS})
 * @param driverHost the address the servers and coordinator bind on and the trainers reach
 *     (null: {@code spark.driver.host})
 * @param device where each trainer computes ({@code DLRM_DEVICE}): null keeps the config's
 *     device; {@code "cpu"}, {@code "cuda:N"}, or {@code "cuda"}: the GPU Spark assigned to
 *     the trainer's task (needs {@code spark.task.resource.gpu.amount=1} and GPUs on the
 *     executors). Servers compute on the driver's CPU.
 */
public record TrainOptions(int partRows, int servers, int holdoutParts, String checkpointDir,
    long timeoutMs, String driverHost, String device) implements Serializable {
  /** Checks each field, naming the one that is wrong. */
  public TrainOptions {
    if (partRows <= 0) {
      throw new IllegalArgumentException("partRows must be positive, got " + partRows);
    }
    if (servers < 0) {
      throw new IllegalArgumentException("servers must be >= 0, got " + servers);
    }
    if (holdoutParts < 0) {
      throw new IllegalArgumentException("holdoutParts must be >= 0, got " + holdoutParts);
    }
    if (timeoutMs <= 0) {
      throw new IllegalArgumentException("timeoutMs must be positive, got " + timeoutMs);
    }
    if (device != null && !device.matches("cpu|cuda|cuda:[0-9]{1,4}")) {
      throw new IllegalArgumentException(
          "device must be null, \"cpu\", \"cuda\" or \"cuda:N\", got \"" + device + "\"");
    }
  }

  /** parts of partRows rows, 1 server, no holdout, no checkpoint, 60 s timeout. */
  public static TrainOptions of(int partRows) {
    return new TrainOptions(partRows, 1, 0, null, 60_000, null, null);
  }

  public TrainOptions withServers(int n) {
    return new TrainOptions(partRows, n, holdoutParts, checkpointDir, timeoutMs, driverHost, device);
  }

  public TrainOptions withHoldoutParts(int n) {
    return new TrainOptions(partRows, servers, n, checkpointDir, timeoutMs, driverHost, device);
  }

  public TrainOptions withCheckpointDir(String dir) {
    return new TrainOptions(partRows, servers, holdoutParts, dir, timeoutMs, driverHost, device);
  }

  public TrainOptions withTimeoutMs(long ms) {
    return new TrainOptions(partRows, servers, holdoutParts, checkpointDir, ms, driverHost, device);
  }

  public TrainOptions withDriverHost(String host) {
    return new TrainOptions(partRows, servers, holdoutParts, checkpointDir, timeoutMs, host, device);
  }

  public TrainOptions withDevice(String name) {
    return new TrainOptions(partRows, servers, holdoutParts, checkpointDir, timeoutMs, driverHost,
        name);
  }
}
