package ai.dlrm;

import ai.dlrm.internal.DlrmNative;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Loads the native libraries: {@code libdlrm} (the engine) and {@code libdlrm_jni} (the
 * SWIG-generated JNI glue linked against it), then checks the engine's ABI version.
 *
 * <p>Where from, in order:
 *
 * <ol>
 *   <li>a directory of {@code java.library.path} holding {@code libdlrm_jni.so}: for
 *       developers and for installations that put the libraries on disk. A {@code
 *       libdlrm.so.<abi>} next to it is loaded first, so the pair found together is used
 *       together;
 *   <li>otherwise the jar: resources under {@code /native/<os>-<arch>/} (the shared libraries
 *       libdlrm loads, listed in its {@code bundled.txt}, then libdlrm and libdlrm_jni) are
 *       copied to a fresh temporary directory, where their RUNPATH ($ORIGIN) finds each
 *       other, and loaded with {@link System#load}, {@code libdlrm} first, so
 *       that the JNI library's dependency on it ({@code DT_NEEDED libdlrm.so.<abi>}) is
 *       satisfied by the copy already loaded. The copies are deleted right after loading
 *       (Linux keeps a loaded library mapped), so a killed JVM leaves nothing behind.
 * </ol>
 *
 * <p>Loading happens once per class loader, when {@link Engine} is first used, so users need not
 * call {@link #load()} themselves; it exists to fail early (e.g. at service start-up).
 */
public final class NativeLoader {
  /** The ABI version of {@code dlrm/dlrm.h} this binding was generated from. */
  public static final int ABI_VERSION = DlrmNative.DLRM_ABI_VERSION;

  /** Where the native libraries were loaded from. */
  public enum Source {
    /** A directory of {@code java.library.path}. */
    LIBRARY_PATH,
    /** Extracted from the jar's resources. */
    JAR
  }

  private static Source source; // guarded by NativeLoader.class
  private static UnsatisfiedLinkError failure; // the first failure, reported again later

  private NativeLoader() {}

  /**
   * Loads the libraries if not done yet and checks {@code dlrm_abi_version()}.
   *
   * @throws UnsatisfiedLinkError if no library could be loaded, or the library's ABI version
   *     differs from {@link #ABI_VERSION}; the message says what was tried
   */
  public static synchronized void load() {
    if (source != null) {
      return;
    }
    if (failure != null) {
      throw newError(failure.getMessage(), failure);
    }
    try {
      Source from = loadLibraries();
      checkAbiVersion();
      source = from;
    } catch (UnsatisfiedLinkError e) {
      failure = e;
      throw e;
    }
  }

  /** Where the libraries came from (loading them if needed). */
  public static synchronized Source source() {
    load();
    return source;
  }

  /** The library's version string, e.g. {@code "0.1.0"}. */
  public static String libraryVersion() {
    load();
    return DlrmNative.dlrm_version();
  }

  private static void checkAbiVersion() {
    int actual = DlrmNative.dlrm_abi_version();
    if (actual != ABI_VERSION) {
      throw new UnsatisfiedLinkError(
          "libdlrm has ABI version " + actual + " but this binding was built for ABI version "
              + ABI_VERSION + "; use the dlrm.jar built with that library");
    }
  }

  private static Source loadLibraries() {
    String jniName = System.mapLibraryName("dlrm_jni");
    Path dir = findOnLibraryPath(jniName);
    if (dir != null) {
      Path core = dir.resolve(coreLibraryName());
      if (Files.isRegularFile(core)) {
        System.load(core.toAbsolutePath().toString());
      }
      System.load(dir.resolve(jniName).toAbsolutePath().toString());
      return Source.LIBRARY_PATH;
    }
    extractAndLoad(jniName);
    return Source.JAR;
  }

  /** {@code libdlrm.so.<abi>}: the soname, the name libdlrm_jni asks the loader for. */
  private static String coreLibraryName() {
    return System.mapLibraryName("dlrm") + "." + ABI_VERSION;
  }

  private static Path findOnLibraryPath(String fileName) {
    String path = System.getProperty("java.library.path", "");
    for (String entry : path.split(File.pathSeparator)) {
      if (entry.isEmpty()) {
        continue;
      }
      try {
        Path dir = Paths.get(entry);
        if (Files.isRegularFile(dir.resolve(fileName))) {
          return dir;
        }
      } catch (RuntimeException e) {
        // an unusable entry (bad syntax): ignore it, as System.loadLibrary does
      }
    }
    return null;
  }

  private static void extractAndLoad(String jniName) {
    String platform = platform();
    String resourceDir = "/native/" + platform + "/";
    List<String> names = new ArrayList<>(bundledNames(resourceDir)); // RUNPATH $ORIGIN finds them
    names.add(coreLibraryName()); // then the engine, then the JNI library that needs it
    names.add(jniName);
    Path dir;
    try {
      dir = Files.createTempDirectory("dlrm-native-");
    } catch (IOException e) {
      throw newError("cannot create a temporary directory for the native libraries", e);
    }
    try {
      for (String name : names) {
        extract(resourceDir, name, dir.resolve(name), platform);
      }
      System.load(dir.resolve(coreLibraryName()).toString());
      System.load(dir.resolve(jniName).toString());
    } finally {
      for (String name : names) {
        try {
          Files.deleteIfExists(dir.resolve(name));
        } catch (IOException e) {
          dir.resolve(name).toFile().deleteOnExit();
        }
      }
      try {
        Files.deleteIfExists(dir);
      } catch (IOException e) {
        dir.toFile().deleteOnExit();
      }
    }
  }

  /** The shared libraries libdlrm loads that the jar carries (its bundled.txt). */
  private static List<String> bundledNames(String resourceDir) {
    List<String> names = new ArrayList<>();
    try (InputStream in = NativeLoader.class.getResourceAsStream(resourceDir + "bundled.txt")) {
      if (in == null) {
        return names; // a jar of libdlrm alone: its dependencies come from the system
      }
      for (String line : new String(in.readAllBytes(), StandardCharsets.UTF_8).split("\n")) {
        if (!line.isBlank()) {
          names.add(line.strip());
        }
      }
    } catch (IOException e) {
      throw newError("cannot read " + resourceDir + "bundled.txt from the jar", e);
    }
    return names;
  }

  private static void extract(String resourceDir, String name, Path target, String platform) {
    try (InputStream in = NativeLoader.class.getResourceAsStream(resourceDir + name)) {
      if (in == null) {
        throw newError(
            "libdlrm_jni is neither on java.library.path ("
                + System.getProperty("java.library.path") + ") nor in the jar as "
                + resourceDir + name + " (platform " + platform + ")",
            null);
      }
      Files.copy(in, target, StandardCopyOption.REPLACE_EXISTING);
    } catch (IOException e) {
      throw newError("cannot extract " + resourceDir + name + " to " + target, e);
    }
  }


  /** Resource directory name of this platform, e.g. {@code linux-x86_64}. */
  static String platform() {
    String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
    String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
    if (os.startsWith("linux")) {
      os = "linux";
    } else if (os.startsWith("mac")) {
      os = "macos";
    } else if (os.startsWith("windows")) {
      os = "windows";
    }
    if (arch.equals("amd64") || arch.equals("x86_64")) {
      arch = "x86_64";
    } else if (arch.equals("arm64")) {
      arch = "aarch64";
    }
    return os + "-" + arch;
  }

  private static UnsatisfiedLinkError newError(String message, Throwable cause) {
    UnsatisfiedLinkError error = new UnsatisfiedLinkError(message);
    if (cause != null) {
      error.initCause(cause);
    }
    return error;
  }
}
