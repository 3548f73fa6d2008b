package ai.dlrm;

import static org.junit.Assert.assertSame;
import static org.junit.Assert.assertThrows;
import static org.junit.Assert.assertTrue;
import static org.junit.Assume.assumeTrue;

import org.junit.Test;

/**
 * Loading a libdlrm of another ABI version fails with a message naming both versions, and
 * keeps failing the same way. Runs only in ctest's java_abi_mismatch, whose
 * java.library.path holds a stub libdlrm that reports ABI version {@code ABI_VERSION + 1}.
 */
public class AbiMismatchTest {
  @Test
  public void refusesAnotherAbiVersion() {
    assumeTrue("dlrm.test.expectAbiMismatch is not set",
        Boolean.getBoolean("dlrm.test.expectAbiMismatch"));
    int ours = NativeLoader.ABI_VERSION;
    UnsatisfiedLinkError first = assertThrows(UnsatisfiedLinkError.class, NativeLoader::load);
    String message = first.getMessage();
    assertTrue(message, message.contains("ABI version " + (ours + 1)));
    assertTrue(message, message.contains("ABI version " + ours));

    UnsatisfiedLinkError again = assertThrows(UnsatisfiedLinkError.class, NativeLoader::load);
    assertTrue(again.getMessage(), again.getMessage().equals(message));
    assertSame(first, again.getCause());
    assertThrows(UnsatisfiedLinkError.class, () -> Engine.create(TestData.CONFIG));
  }
}
