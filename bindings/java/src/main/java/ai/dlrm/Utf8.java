package ai.dlrm;

import java.nio.charset.StandardCharsets;
import java.nio.file.FileSystems;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Objects;

/**
 * Strings to and from the C ABI. The library speaks NUL-terminated UTF-8; JNI's own string
 * functions speak "modified UTF-8" (different for NUL and characters outside the BMP), so
 * the binding encodes and decodes in Java instead.
 */
final class Utf8 {
  private Utf8() {}

  /** NUL-terminated UTF-8 of {@code text}; an embedded NUL would silently cut it short. */
  static byte[] cString(String text, String argument) {
    Objects.requireNonNull(text, argument);
    if (text.indexOf('\0') >= 0) {
      throw new IllegalArgumentException(argument + " contains a NUL character");
    }
    byte[] bytes = text.getBytes(StandardCharsets.UTF_8);
    return Arrays.copyOf(bytes, bytes.length + 1);
  }

  /** A path the library can open: absolute (the JVM's user.dir may differ from the process
   * working directory) and on the default file system (a zip or in-memory file system is
   * invisible to native code). */
  static byte[] path(Path path, String argument) {
    Objects.requireNonNull(path, argument);
    if (path.getFileSystem() != FileSystems.getDefault()) {
      throw new IllegalArgumentException(argument + " must be on the default file system: " + path);
    }
    return cString(path.toAbsolutePath().toString(), argument);
  }

  static String decode(byte[] utf8) {
    return utf8 == null ? null : new String(utf8, StandardCharsets.UTF_8);
  }
}
