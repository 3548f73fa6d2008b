package ai.dlrm.spark;

import ai.dlrm.DistributedTrainer;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * Trains a libdlrm model on a Spark DataFrame: a barrier stage runs one trainer per
 * partition on the executors (they agree on the steps and share the holdout through Spark's
 * {@code BarrierTaskContext.allGather}; the trainers' own collectives go over libdlrm's
 * transport, executor to executor); the job's coordinator and embedding servers run as
 * threads of the driver (no servers: the trainers own the embedding tables). In the config's sync mode the result is bitwise that of one {@code Engine}
 * trained on the same global batches (step s: partition 0's part s, then partition 1's, ...).
 *
 * <pre>{@code
 * FeatureColumns cols = new FeatureColumns("click", List.of("i1", "i2"), List.of("c1", "c2"));
 * TrainResult r = SparkTrainer.fit(spark, df.repartition(4), config, cols,
 *     TrainOptions.of(512).withServers(2).withHoldoutParts(1).withCheckpointDir("/shared/ck"));
 * }</pre>
 *
 * <p>The cluster needs as many free task slots as the DataFrame has partitions (barrier
 * mode), the driver reachable from the executors on {@code driverHost}, and the checkpoint
 * directory on a filesystem every process sees. The native library travels inside the
 * libdlrm jar (give it and this jar to {@code spark-submit --jars}).
 *
 * <p>Errors: a bad row fails its task naming the column and row, which fails the stage;
 * the servers then end within the timeout and this call throws. Stage retries cannot rejoin
 * a job (the retried task says so).
 */
public final class SparkTrainer {
  private SparkTrainer() {}

  /** Trains, blocking until the job has ended; see the class comment. */
  public static TrainResult fit(SparkSession spark, Dataset<Row> df, String config,
      FeatureColumns columns, TrainOptions options) {
    Objects.requireNonNull(spark, "spark");
    Objects.requireNonNull(df, "df");
    Objects.requireNonNull(config, "config");
    Objects.requireNonNull(columns, "columns");
    Objects.requireNonNull(options, "options");
    // Before anything starts: a task's own refusal can lose to the rendezvous timeout.
    if ("cuda".equals(options.device())
        && !spark.sparkContext().getConf().contains("spark.task.resource.gpu.amount")) {
      throw new IllegalArgumentException("device \"cuda\" " + TrainerTask.NO_GPU
          + "; this session sets none");
    }
    int trainers = df.rdd().getNumPartitions();
    String host = address(options.driverHost() != null ? options.driverHost()
                                                       : spark.conf().get("spark.driver.host"));
    String coordinator = host + ":" + freePort(host);
    String group = "libdlrm-fit-" + coordinator;
    // A role that fails (a port taken, a bad config) cancels the stage instead of leaving
    // the trainers to time out.
    Runnable cancel = () -> spark.sparkContext().cancelJobGroup(group);
    List<RoleThread> roles = startRoles(config, options, host, coordinator, trainers, cancel);
    TrainerOutcome[] outcomes = runStage(spark, df,
        new TrainerTask(config, columns, options, coordinator, trainers), group, roles,
        options.timeoutMs());
    joinRoles(roles, options.timeoutMs() * 2);
    for (RoleThread r : roles) {
      if (r.error != null) {
        throw new IllegalStateException("libdlrm " + r.getName() + " failed", r.error);
      }
    }
    Arrays.sort(outcomes, Comparator.comparingInt(TrainerOutcome::rank));
    return new TrainResult(trainers, Arrays.asList(outcomes), options.checkpointDir());
  }

  /**
   * The barrier stage. A failure (collect() throws Spark's checked SparkException too) waits
   * for the roles to end by timeout and throws, the roles' own errors attached.
   */
  private static TrainerOutcome[] runStage(SparkSession spark, Dataset<Row> df,
      TrainerTask task, String group, List<RoleThread> roles, long timeoutMs) {
    ClassTag<TrainerOutcome> tag = ClassTag$.MODULE$.apply(TrainerOutcome.class);
    try {
      spark.sparkContext().setJobGroup(group, "libdlrm trainers", true);
      RDD<TrainerOutcome> out = df.rdd().barrier().mapPartitions(task, false, tag);
      return (TrainerOutcome[]) out.collect();
    } catch (Exception e) {
      joinRoles(roles, timeoutMs * 2);
      IllegalStateException failure =
          new IllegalStateException("libdlrm Spark job failed: " + e.getMessage(), e);
      for (RoleThread r : roles) {
        if (r.error != null) {
          failure.addSuppressed(r.error);
        }
      }
      throw failure;
    } finally {
      spark.sparkContext().clearJobGroup();
    }
  }

  /** The coordinator, then the servers (ranks [0, S)), as driver threads. */
  private static List<RoleThread> startRoles(String config, TrainOptions options, String host,
      String coordinator, int trainers, Runnable onError) {
    List<RoleThread> roles = new ArrayList<>();
    roles.add(new RoleThread("coordinator", config,
        settings("coordinator", -1, options, host, coordinator, trainers), onError));
    roles.get(0).start();
    try {
      Thread.sleep(200); // the coordinator binds its port before the servers pick theirs
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    for (int s = 0; s < options.servers(); s++) {
      RoleThread server = new RoleThread("server " + s, config,
          settings("server", s, options, host, coordinator, trainers), onError);
      server.start();
      roles.add(server);
    }
    return roles;
  }

  private static Map<String, String> settings(String role, int rank, TrainOptions options,
      String host, String coordinator, int trainers) {
    Map<String, String> c = new HashMap<>();
    c.put("DLRM_ROLE", role);
    if (rank >= 0) {
      c.put("DLRM_RANK", Integer.toString(rank));
    }
    c.put("DLRM_WORLD_SIZE", Integer.toString(options.servers() + trainers));
    c.put("DLRM_COORDINATOR", coordinator);
    c.put("DLRM_BIND_ADDRESS", host);
    c.put("DLRM_TIMEOUT_MS", Long.toString(options.timeoutMs()));
    return c;
  }

  private static void joinRoles(List<RoleThread> roles, long timeoutMs) {
    long deadline = System.currentTimeMillis() + timeoutMs;
    for (RoleThread r : roles) {
      try {
        r.join(Math.max(1, deadline - System.currentTimeMillis()));
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      }
    }
  }

  /** A host name as the IP address the job's sockets bind and connect to. */
  static String address(String host) {
    try {
      return InetAddress.getByName(host).getHostAddress();
    } catch (IOException e) {
      throw new IllegalArgumentException("cannot resolve host " + host, e);
    }
  }

  private static int freePort(String host) {
    try (ServerSocket s = new ServerSocket()) {
      s.bind(new InetSocketAddress(InetAddress.getByName(host), 0));
      return s.getLocalPort();
    } catch (IOException e) {
      throw new IllegalArgumentException("cannot bind a port on driverHost " + host, e);
    }
  }

  /** A coordinator or server: runs until the job ends, keeping its error. */
  private static final class RoleThread extends Thread {
    private final String config;
    private final Map<String, String> cluster;
    private final Runnable onError;
    private volatile RuntimeException error;

    RoleThread(String name, String config, Map<String, String> cluster, Runnable onError) {
      super("libdlrm " + name);
      setDaemon(true);
      this.config = config;
      this.cluster = cluster;
      this.onError = onError;
    }

    @Override
    public void run() {
      try {
        DistributedTrainer.runRole(config, cluster);
      } catch (RuntimeException e) {
        error = e;
        onError.run();
      }
    }
  }
}
