package ai.dlrm;

import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertTrue;
import static org.junit.Assume.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.Test;

/**
 * The binding covers every function of the C ABI: each DLRM_API function of {@code
 * include/dlrm/dlrm.h} is either wrapped for Java ({@code %rename("%s") name;} in dlrm.i) or
 * called by dlrm.i's helpers. A function added to the header fails this test until the
 * binding reaches it. (The Python binding's test_prototypes_cover_exactly_the_header.)
 */
public class HeaderCoverageTest {
  private static final Pattern API =
      Pattern.compile("DLRM_API\\s+[\\w\\s*]+?\\b(dlrm_\\w+)\\s*\\(");

  @Test
  public void everyHeaderFunctionIsReachedFromDlrmI() throws Exception {
    String source = System.getProperty("dlrm.test.sourceDir");
    assumeTrue("needs -Ddlrm.test.sourceDir (ctest java_tests sets it)", source != null);
    String header = Files.readString(Path.of(source, "include", "dlrm", "dlrm.h"));
    String wrapper = Files.readString(Path.of(source, "bindings", "java", "dlrm.i"));
    List<String> functions = new ArrayList<>();
    Matcher m = API.matcher(header);
    while (m.find()) {
      functions.add(m.group(1));
    }
    assertTrue(functions.toString(), functions.contains("dlrm_set_log_callback"));
    List<String> missing = new ArrayList<>();
    for (String f : functions) {
      boolean wrapped = wrapper.contains("%rename(\"%s\") " + f + ";");
      boolean called = Pattern.compile("\\b" + f + "\\(").matcher(wrapper).find();
      if (!wrapped && !called) {
        missing.add(f);
      }
    }
    assertEquals("header functions the Java binding does not reach", List.of(), missing);
  }
}
