"""dlrm.spark on a local cluster of two executor JVMs (ctest python_spark_test, label spark;
not part of python_tests: it starts Spark). A 2-partition DataFrame fitted in sync mode
gives bitwise the losses and holdout evaluation of one dlrm.Engine on the same global
batches; transform's probabilities are bitwise that engine's predictions; a null fails
the fit naming the column and row."""
from __future__ import annotations

import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dlrm  # noqa: E402
from dlrm.spark import DlrmEstimator  # noqa: E402

pyspark = pytest.importorskip("pyspark")

PART = 64
CONFIG = """
model {
  num_dense_features: 3
  tables { name: 't0' num_rows: 200 dim: 8 }
  tables { name: 't1' num_rows: 50 dim: 8 }
  sparse_features { name: 'c0' table: 't0' }
  sparse_features { name: 'c1' table: 't1' pooling: MEAN }
  bottom_mlp { layer_sizes: 16 layer_sizes: 8 }
  top_mlp { layer_sizes: 16 layer_sizes: 1 }
}
dense_optimizer { learning_rate: 0.01 adam {} }
sparse_optimizer { learning_rate: 0.05 rowwise_adagrad {} }
seed: 11 num_threads: 1 reduction_chunk_rows: 32
sharding { data_parallel_max_bytes: 0 }
"""
COLS = dlrm.Columns(dense=["d0", "d1", "d2"], sparse=["c0", "c1"], label="click")


def rows(n: int, null_row: int = -1) -> List[Dict[str, object]]:
    rng = random.Random(5)
    out = []
    for i in range(n):
        c0 = [rng.randrange(200) for _ in range(rng.randrange(4))]
        d0 = rng.random()
        out.append({"d0": d0, "d1": None if i == null_row else rng.random(), "d2": rng.random(),
                    "click": int(d0 + (0.5 if c0 and c0[0] % 3 == 0 else 0) > 0.8),
                    "c0": c0, "c1": [rng.randrange(50) for _ in range(rng.randrange(4))]})
    return out


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession
    library = os.environ["DLRM_LIBRARY"]
    package = str(Path(dlrm.__file__).resolve().parents[1])
    session = (SparkSession.builder.master("local-cluster[2,1,1024]")
               .config("spark.cores.max", "2")
               .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
               .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
               .config("spark.ui.enabled", "false")
               .config("spark.log.level", "WARN")
               .config("spark.executorEnv.DLRM_LIBRARY", library)
               .config("spark.executorEnv.PYTHONPATH", package)
               .config("spark.executorEnv.PYTHONDONTWRITEBYTECODE", "1")
               .getOrCreate())
    yield session
    session.stop()


def frame(spark, data):
    from pyspark.sql.types import (ArrayType, DoubleType, IntegerType, LongType, StructField,
                                   StructType)
    schema = StructType([StructField("d0", DoubleType()), StructField("d1", DoubleType()),
                         StructField("d2", DoubleType()), StructField("click", IntegerType()),
                         StructField("c0", ArrayType(LongType())),
                         StructField("c1", ArrayType(LongType()))])
    return spark.createDataFrame(spark.sparkContext.parallelize(data, 2), schema)


def bits(x) -> bytes:
    return np.asarray(x, np.float32).tobytes()


# servers=0: the trainers own the embedding shards (no server threads on the driver).
@pytest.mark.parametrize("servers", [2, 0])
def test_fit_and_transform_equal_one_engine_bitwise(spark, tmp_path, servers):
    df = frame(spark, rows(2 * 6 * PART))
    partitions = [[r.asDict() for r in p] for p in df.rdd.glom().collect()]
    ckpt = str(tmp_path / "ckpt")
    start = time.monotonic()
    # device="cpu" reaches each trainer as DLRM_DEVICE (the config's device otherwise).
    model = DlrmEstimator(CONFIG, COLS, part_rows=PART, servers=servers, holdout_parts=1,
                          checkpoint_dir=ckpt, timeout_ms=30000,
                          device="cpu" if servers == 0 else None).fit(df)
    print(f"dlrm.spark fit ({servers} servers): {len(model.losses)} steps in "
          f"{time.monotonic() - start:.1f} s")
    assert len(model.losses) == 5 and len(model.outcomes) == 2
    with dlrm.Engine(CONFIG) as engine:
        for s, loss in enumerate(model.losses):
            step_rows = [r for p in partitions for r in p[s * PART:(s + 1) * PART]]
            assert bits(engine.train_step(dlrm.Batch.from_rows(step_rows, COLS))) == bits(loss)
        want = engine.evaluate([dlrm.Batch.from_rows(p[-PART:], COLS) for p in partitions])
        got = model.outcomes[0]
        assert (got.log_loss, got.auc, got.eval_samples) == \
            (want.log_loss, want.auc, want.num_samples)
        test = rows(100)
        expected = engine.predict(dlrm.Batch.from_rows(test, COLS))
    scored = model.transform(frame(spark, test).coalesce(1)).collect()
    assert bits([r.probability for r in scored]) == bits(expected)


def test_a_null_fails_the_fit_naming_column_and_row(spark):
    df = frame(spark, rows(2 * 2 * PART, null_row=2 * PART + 7))
    named = r"partition 1, part 0 \(rows 0..63\): row 7, column 'd1': expected a number"
    with pytest.raises(RuntimeError, match=named):
        DlrmEstimator(CONFIG, COLS, part_rows=PART, timeout_ms=5000).fit(df)


def test_device_cuda_needs_a_gpu_for_each_trainer_task(spark):
    """device="cuda" puts each trainer on the GPU Spark assigned its task; this session
    gives tasks none, so the fit is refused naming the setting before anything starts."""
    df = frame(spark, rows(2 * 2 * PART))
    with pytest.raises(ValueError, match="spark.task.resource.gpu.amount"):
        DlrmEstimator(CONFIG, COLS, part_rows=PART, timeout_ms=5000, device="cuda").fit(df)


def gpu_session(spark, tmp_path):
    """The module's session stopped, and one whose workers each announce two GPUs (a
    discovery script) and whose tasks take one each, as a GPU cluster's would."""
    from pyspark.sql import SparkSession
    script = tmp_path / "gpus.sh"
    script.write_text('#!/bin/sh\necho \'{"name": "gpu", "addresses": ["0", "1"]}\'\n')
    script.chmod(0o755)
    conf = spark.sparkContext.getConf()
    spark.stop()
    builder = SparkSession.builder.master("local-cluster[2,1,1024]")
    for key in ("spark.cores.max", "spark.scheduler.minRegisteredResourcesRatio",
                "spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "spark.ui.enabled",
                "spark.log.level", "spark.executorEnv.DLRM_LIBRARY",
                "spark.executorEnv.PYTHONPATH", "spark.executorEnv.PYTHONDONTWRITEBYTECODE"):
        builder = builder.config(key, conf.get(key))
    return (builder.config("spark.worker.resource.gpu.amount", "2")
            .config("spark.worker.resource.gpu.discoveryScript", str(script))
            .config("spark.executor.resource.gpu.amount", "1")
            .config("spark.task.resource.gpu.amount", "1").getOrCreate())


# Last in the file: it replaces the module's session.
@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU would train")
def test_device_cuda_is_the_gpu_spark_assigned_each_task(spark, tmp_path):
    """On a session whose tasks get GPUs, device="cuda" reaches each trainer as its task's
    GPU; here none can be used, so the fit ends naming why (the trainer tells the job its
    error, not only that it left)."""
    session = gpu_session(spark, tmp_path)
    try:
        df = frame(session, rows(2 * 2 * PART))
        # The executors started, so the job's rendezvous clock does not include that.
        assert session.sparkContext.parallelize(range(2), 2).barrier() \
            .mapPartitions(lambda rows: [len(list(rows))]).collect() == [1, 1]
        with pytest.raises(RuntimeError, match="trainer [01] .* failed: (no usable CUDA device"
                                               "|device.kind is CUDA but this libdlrm was built "
                                               "without CUDA)"):
            DlrmEstimator(CONFIG, COLS, part_rows=PART, timeout_ms=30000, device="cuda").fit(df)
    finally:
        session.stop()

