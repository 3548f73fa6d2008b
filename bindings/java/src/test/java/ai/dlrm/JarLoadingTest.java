package ai.dlrm;

import static org.junit.Assert.assertEquals;
import static org.junit.Assume.assumeTrue;

import org.junit.Test;

/**
 * Where the native libraries came from. ctest runs java_tests with java.library.path
 * (expecting LIBRARY_PATH) and java_jar_loading without it (expecting JAR: extracted from
 * dlrm.jar); the property dlrm.test.expectSource says which.
 */
public class JarLoadingTest {
  @Test
  public void librariesComeFromTheExpectedPlace() {
    String expected = System.getProperty("dlrm.test.expectSource");
    assumeTrue("dlrm.test.expectSource is not set", expected != null);
    assertEquals(NativeLoader.Source.valueOf(expected), NativeLoader.source());
    try (Engine engine = Engine.create(TestData.CONFIG)) {
      engine.trainStep(TestData.batch(0));
      assertEquals(TestData.B, engine.predict(TestData.reference()).length);
    }
  }
}
