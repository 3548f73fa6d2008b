/**
 * Java binding of libdlrm, a training engine for DLRM recommendation models.
 *
 * <p>{@link ai.dlrm.Engine} owns one native engine; {@link ai.dlrm.Batch} describes one
 * batch of samples in the engine's column-oriented layout, either over Java arrays or over
 * direct {@link java.nio.ByteBuffer}s (no copy). Failures of the engine surface as
 * {@link ai.dlrm.DlrmException} with a {@link ai.dlrm.StatusCode} and the engine's message,
 * which names the argument or config field that was wrong.
 *
 * <pre>{@code
 * try (Engine engine = Engine.create(configText)) {
 *   Batch batch = Batch.builder()
 *       .dense(dense).labels(labels).lengths(lengths).ids(ids)
 *       .build();
 *   float loss = engine.trainStep(batch);
 *   float[] clickProbabilities = engine.predict(batch);
 * }
 * }</pre>
 *
 * <p>{@link ai.dlrm.Batch#fromArrow} copies a batch out of Arrow columns exported through the
 * Arrow C Data Interface (Arrow Java's {@code org.apache.arrow.c}), mapped by {@link
 * ai.dlrm.ArrowColumns}.
 *
 * <p>{@link ai.dlrm.DistributedTrainer} is one trainer of a multi-process job of embedding
 * servers and data-parallel trainers, with the job's built-in collective or the host's own
 * ({@link ai.dlrm.AllGather}); {@link ai.dlrm.DistributedTrainer#runRole} runs the
 * coordinator or a server.
 *
 * <p>{@link ai.dlrm.Log} routes the library's log (stderr by default) to a handler or into
 * {@code java.util.logging}.
 *
 * <p>Everything here is a thin layer over the library's C ABI ({@code dlrm/dlrm.h}), reached
 * through SWIG-generated code in {@code ai.dlrm.internal}, which is not part of the API.
 */
package ai.dlrm;
