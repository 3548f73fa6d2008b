package ai.dlrm.spark;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import org.apache.spark.sql.Row;

/** DataFrame rows as one Base64 string (Java serialization): what a barrier allGather carries. */
final class RowCodec {
  private RowCodec() {}

  static String encode(ArrayList<Row> rows) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
      out.writeObject(rows);
    } catch (IOException e) {
      throw new UncheckedIOException("serializing holdout rows", e);
    }
    return Base64.getEncoder().encodeToString(bytes.toByteArray());
  }

  static List<Row> decode(String text) {
    byte[] bytes = Base64.getDecoder().decode(text);
    try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(bytes))) {
      Object rows = in.readObject();
      List<Row> out = new ArrayList<>();
      for (Object row : (List<?>) rows) {
        out.add((Row) row);
      }
      return out;
    } catch (IOException | ClassNotFoundException e) {
      throw new IllegalStateException("a trainer's holdout rows do not deserialize", e);
    }
  }
}
