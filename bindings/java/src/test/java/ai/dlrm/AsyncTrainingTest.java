package ai.dlrm;

import static ai.dlrm.TestData.CONFIG;
import static ai.dlrm.TestData.assertSameBits;
import static ai.dlrm.TestData.batch;
import static ai.dlrm.TestData.reference;
import static org.junit.Assert.assertEquals;
import static org.junit.Assert.assertThrows;

import org.junit.Test;

/** submitTrainStep/waitTrainStep: the asynchronous path gives the synchronous results. */
public class AsyncTrainingTest {
  @Test
  public void submittedStepsEqualSynchronousSteps() {
    try (Engine sync = Engine.create(CONFIG); Engine async = Engine.create(CONFIG)) {
      float[] expected = new float[5];
      long[] tickets = new long[5];
      for (int i = 0; i < 5; ++i) {
        expected[i] = sync.trainStep(batch(i));
        tickets[i] = async.submitTrainStep(batch(i));
      }
      float[] losses = new float[5];
      for (int i = 0; i < 5; ++i) {
        losses[i] = async.waitTrainStep(tickets[i]);
      }
      assertSameBits("losses", expected, losses);
      assertSameBits("predictions", sync.predict(reference()), async.predict(reference()));
      DlrmException again =
          assertThrows(DlrmException.class, () -> async.waitTrainStep(tickets[0]));
      assertEquals(StatusCode.INVALID_ARGUMENT, again.code());
    }
  }

  @Test
  public void waitingForATicketNeverIssuedFails() {
    try (Engine engine = Engine.create(CONFIG)) {
      DlrmException e = assertThrows(DlrmException.class, () -> engine.waitTrainStep(1));
      assertEquals(StatusCode.INVALID_ARGUMENT, e.code());
    }
  }
}
