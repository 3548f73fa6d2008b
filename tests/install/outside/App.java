import ai.dlrm.Batch;
import ai.dlrm.Engine;
import java.nio.file.Files;
import java.nio.file.Path;

/** A Java program outside the libdlrm repository (outside_test.sh): dlrm.jar only. */
public final class App {
  public static void main(String[] args) throws Exception {
    try (Engine engine = Engine.create(Files.readString(Path.of(args[0])))) {
      Batch batch = Batch.builder().dense(new float[] {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f})
          .labels(new float[] {1, 0}).lengths(new int[] {1, 1, 1, 0}).ids(new long[] {4, 9, 2})
          .build();
      engine.trainStep(batch);
      System.out.println("java app: predicts " + engine.predict(batch).length + " probabilities");
    }
  }
}
