package ai.dlrm;

/**
 * One line of libdlrm's log, as a {@link Log} handler receives it.
 *
 * @param level DEBUG, INFO, WARNING or ERROR (never OFF)
 * @param file the library source file that wrote it, e.g. {@code engine/ps/server_role.cc}
 * @param line the line in that file
 * @param message the text, one line without a line break
 */
public record LogMessage(LogLevel level, String file, int line, String message) {
  /** As the library writes it to stderr: {@code [dlrm INFO engine/ps/server.cc:48] text}. */
  @Override
  public String toString() {
    return "[dlrm " + level + " " + file + ":" + line + "] " + message;
  }
}
