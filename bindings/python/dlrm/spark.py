"""Train on a PySpark DataFrame, in the shape of Spark ML (as ``xgboost.spark`` does).

    from dlrm.spark import DlrmEstimator
    est = DlrmEstimator(config, dlrm.Columns(dense=["i1", "i2"], sparse=["c1"], label="click"),
                        part_rows=512, servers=2, checkpoint_dir="/shared/ckpt")
    model = est.fit(train_df)             # a barrier stage: one trainer per partition
    scored = model.transform(test_df)     # adds the click probability ("probability")

``fit`` runs the job's coordinator and embedding servers as threads of the driver and one
trainer per partition of the DataFrame in a barrier stage; the tasks agree on the steps
and share the holdout through Spark's ``BarrierTaskContext.allGather``, and the trainers'
own collectives go over libdlrm's transport, executor to executor (through the driver's
allGather each cost a second). With ``servers=0`` the trainers own the embedding shards
themselves: the tables live in the executors, not the driver. Step s trains partition 0's
part s, then partition 1's, ...: in sync mode the result is bitwise that of one
:class:`dlrm.Engine` trained on those global batches. ``transform`` loads the job's
sharded checkpoint whole in each Python worker and predicts through the Arrow path.

The task's protocol has a twin in Java, ``ai.dlrm.spark.TrainerTask``
(bindings/java/spark): both make the same ``allGather`` calls in the same order (the part
counts, then the holdout rows), so a change to one is a change to both.

Rows are records of the DataFrame's columns (:func:`dlrm.arrow.from_rows`): numeric dense
columns and label, sparse columns of arrays of integers (null: an empty bag); a bad value
fails the fit naming its column and row. Every executor needs this package and libdlrm
(``pip install`` it there, or set ``spark.executorEnv.PYTHONPATH`` / ``DLRM_LIBRARY``),
a free task slot per partition, and the checkpoint directory on a filesystem every
process sees.
"""
from __future__ import annotations

import base64
import pickle
import socket
import threading
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence

from . import arrow, distributed
from .arrow import Columns


class TrainOutcome(NamedTuple):
    """What one trainer reported: its rank, every step's global loss (the same on every
    trainer) and the holdout evaluation (NaN / 0 without holdout parts)."""

    rank: int
    losses: List[float]
    log_loss: float
    auc: float
    eval_samples: int


class _Job(NamedTuple):
    """What a trainer task needs (pickled to the executors)."""

    config: str
    columns: Columns
    part_rows: int
    holdout_parts: int
    servers: int
    trainers: int
    coordinator: str
    checkpoint_dir: Optional[str]
    timeout_ms: int
    device: Optional[str] = None


def _address(host: str) -> str:
    return socket.gethostbyname(host)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _gather(ctx: Any, data: bytes) -> List[bytes]:
    """Spark's barrier allGather (strings, in partition order) carrying bytes as Base64."""
    return [base64.b64decode(m) for m in ctx.allGather(base64.b64encode(data).decode("ascii"))]


def _parts(rows: List[Dict[str, Any]], job: _Job, where: str = "") -> List[Any]:
    """Full parts of part_rows rows; a bad value's error names where its part starts."""
    p, out = job.part_rows, []
    for i in range(len(rows) // p):
        try:
            out.append(arrow.from_rows(rows[i * p:(i + 1) * p], job.columns))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}part {i} (rows {i * p}..{(i + 1) * p - 1}): {e}") from None
    return out


def _agree_on_steps(ctx: Any, job: _Job, my_parts: int) -> int:
    steps = min(int(n) for n in ctx.allGather(str(my_parts))) - job.holdout_parts
    if steps <= 0:
        raise ValueError(f"a partition has too few rows: every partition needs more than "
                         f"holdout_parts ({job.holdout_parts}) parts of part_rows "
                         f"({job.part_rows}) rows; this one has {my_parts}")
    return steps


def _holdout(ctx: Any, job: _Job, rows: List[Dict[str, Any]], my_parts: int) -> List[Any]:
    """Every trainer's holdout parts in rank order (each trainer evaluates the same
    batches): the last holdout_parts full parts of each partition, exchanged as rows."""
    if job.holdout_parts == 0:
        return []
    end = my_parts * job.part_rows
    mine = rows[end - job.holdout_parts * job.part_rows:end]
    out: List[Any] = []
    for data in _gather(ctx, pickle.dumps(mine)):
        out.extend(_parts(pickle.loads(data), job))
    return out


def _check_device(device: Optional[str]) -> None:
    """None, "cpu", "cuda" or "cuda:N" (DlrmEstimator's device)."""
    if device is None or device in ("cpu", "cuda"):
        return
    if not isinstance(device, str):
        raise ValueError(f"device must be None, 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    ordinal = device[len("cuda:"):] if device.startswith("cuda:") else ""
    if not (ordinal.isdigit() and ordinal.isascii() and len(ordinal) <= 4):
        raise ValueError(f"device must be None, 'cpu', 'cuda' or 'cuda:N', got {device!r}")


_NO_GPU = ("needs a GPU for each trainer task: set spark.task.resource.gpu.amount=1 and the "
           "executors' GPUs (spark.executor.resource.gpu.amount, "
           "spark.executor.resource.gpu.discoveryScript)")


def _require_gpu_tasks(conf: Any, device: Optional[str]) -> None:
    """device='cuda' on a session whose tasks get no GPU: refused before anything starts (a
    task's own refusal can lose to the coordinator's rendezvous timeout)."""
    if device == "cuda" and not conf.get("spark.task.resource.gpu.amount"):
        raise ValueError(f"device='cuda' {_NO_GPU}; this session sets none")


def _task_device(ctx: Any, device: str) -> str:
    """The trainer's DLRM_DEVICE: "cuda" is the GPU Spark assigned to this task."""
    if device != "cuda":
        return device
    gpu = ctx.resources().get("gpu")
    addresses = list(gpu.addresses) if gpu is not None else []
    if not addresses:
        raise RuntimeError(f"device='cuda' {_NO_GPU}; Spark assigned this task none")
    if not (addresses[0].isdigit() and addresses[0].isascii()):
        raise RuntimeError(f"Spark assigned this task GPU address {addresses[0]!r}, which is "
                           "not a CUDA device ordinal")
    return f"cuda:{addresses[0]}"


def _settings(ctx: Any, job: _Job, device: Optional[str]) -> Dict[str, object]:
    """The trainer's DLRM_* settings; device: its _task_device (None: the config's)."""
    host = ctx.getTaskInfos()[ctx.partitionId()].address.rsplit(":", 1)[0]
    settings: Dict[str, object] = {
        "DLRM_ROLE": "trainer", "DLRM_RANK": job.servers + ctx.partitionId(),
        "DLRM_WORLD_SIZE": job.servers + job.trainers, "DLRM_COORDINATOR": job.coordinator,
        "DLRM_BIND_ADDRESS": _address(host), "DLRM_TIMEOUT_MS": job.timeout_ms}
    if device is not None:
        settings["DLRM_DEVICE"] = device
    return settings


def _train_partition(job: _Job, rows_iter: Iterator[Any]) -> Iterator[TrainOutcome]:
    """The barrier task: this partition's trainer, from its rows to its outcome."""
    from pyspark import BarrierTaskContext
    ctx = BarrierTaskContext.get()
    rows = [r.asDict() for r in rows_iter]
    # Bad data fails every attempt alike, before joining.
    parts = _parts(rows, job, f"partition {ctx.partitionId()}, ")
    device = None if job.device is None else _task_device(ctx, job.device)  # as bad data
    if ctx.attemptNumber() > 0:  # (a retried stage's tasks are refused at rendezvous)
        raise RuntimeError("a retried trainer task cannot rejoin the libdlrm job; fit again "
                           "(from a checkpoint)")
    steps = _agree_on_steps(ctx, job, len(parts))
    held = _holdout(ctx, job, rows, len(parts))
    # The job's collectives go over libdlrm's own transport, executor to executor: through
    # Spark's allGather (the driver, Base64) each took about 1.2 s here, a floor under every
    # step (and the trainers that own the shards make four a step).
    with distributed.Trainer(job.config, _settings(ctx, job, device)) as t:
        t.enqueue(parts[0])
        losses = []
        for s in range(steps):
            if s + 1 < steps:
                t.enqueue(parts[s + 1])  # its lookups travel while step s computes
            losses.append(t.train_step())
        ev = t.evaluate(held) if held else None
        if job.checkpoint_dir is not None:
            t.checkpoint(job.checkpoint_dir)
        t.finish()
        yield TrainOutcome(t.rank, losses, ev.log_loss if ev else float("nan"),
                           ev.auc if ev else float("nan"), ev.num_samples if ev else 0)


class _Role(threading.Thread):
    """The coordinator or a server on the driver; keeps its error, cancels the stage."""

    def __init__(self, name: str, config: str, settings: Dict[str, object],
                 on_error: Any) -> None:
        super().__init__(name=f"libdlrm {name}", daemon=True)
        self._config, self._settings, self._on_error = config, settings, on_error
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            distributed.run_role(self._config, self._settings)
        except BaseException as e:  # noqa: B902 - reported by fit
            self.error = e
            self._on_error()


class DlrmModel:
    """A fitted model: the job's checkpoint and what its trainers reported."""

    def __init__(self, checkpoint_dir: Optional[str], columns: Columns,
                 outcomes: Sequence[TrainOutcome], prediction_col: str) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.columns = columns
        self.outcomes = list(outcomes)
        self.prediction_col = prediction_col

    @property
    def losses(self) -> List[float]:
        """The global loss of every step."""
        return self.outcomes[0].losses

    def transform(self, df: Any) -> Any:
        """df with a float column ``prediction_col``: each row's click probability, from
        the checkpoint loaded whole in every Python worker (label column not needed)."""
        if self.checkpoint_dir is None:
            raise ValueError("transform needs the model's checkpoint: fit with checkpoint_dir")
        from pyspark.sql.types import FloatType, StructField, StructType
        ckpt, columns, col = self.checkpoint_dir, self.columns._replace(label=None), \
            self.prediction_col

        def predict(frames: Iterator[Any]) -> Iterator[Any]:
            from . import Engine
            with Engine.from_checkpoint(ckpt) as engine:
                for frame in frames:
                    if len(frame):
                        frame[col] = engine.predict(arrow.from_pandas(frame, columns))
                    else:
                        frame[col] = []
                    yield frame

        schema = StructType(list(df.schema.fields) + [StructField(col, FloatType(), False)])
        return df.mapInPandas(predict, schema)


class DlrmEstimator:
    """Trains a libdlrm model on a DataFrame; see the module doc.

    Args:
        config: the model config (protobuf text); its distributed mode applies.
        columns: which column is which (:class:`dlrm.Columns`; label required).
        part_rows: rows of each trainer's part of a global batch (reduction_chunk_rows
            times a power of two); a global batch is part_rows x partitions rows.
        servers: embedding servers, as driver threads; 0: the trainers own the embedding
            shards (sync only), spreading the tables over the executors.
        holdout_parts: each partition's last this many parts are evaluated, not trained.
        checkpoint_dir: the job's sharded checkpoint of the last step (needed by
            transform), on a filesystem every process sees.
        timeout_ms: every wait of the job (DLRM_TIMEOUT_MS).
        driver_host: the address the servers bind on (default spark.driver.host).
        prediction_col: the column transform adds.
        device: where each trainer computes (DLRM_DEVICE): None keeps the config's device,
            "cpu", "cuda:N", or "cuda": the GPU Spark assigned to the trainer's task (as
            xgboost.spark's device="cuda"; needs spark.task.resource.gpu.amount=1 and GPUs
            on the executors). Servers compute on the driver's CPU.
    """

    def __init__(self, config: str, columns: Columns, part_rows: int, servers: int = 1,
                 holdout_parts: int = 0, checkpoint_dir: Optional[str] = None,
                 timeout_ms: int = 60000, driver_host: Optional[str] = None,
                 prediction_col: str = "probability", device: Optional[str] = None) -> None:
        if columns.label is None:
            raise ValueError("columns.label is required to train")
        _check_device(device)
        for name, value, low in (("part_rows", part_rows, 1), ("servers", servers, 0),
                                 ("holdout_parts", holdout_parts, 0),
                                 ("timeout_ms", timeout_ms, 1)):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        self.config, self.columns, self.part_rows, self.servers = config, columns, part_rows, \
            servers
        self.holdout_parts, self.checkpoint_dir, self.timeout_ms = holdout_parts, \
            checkpoint_dir, timeout_ms
        self.driver_host, self.prediction_col, self.device = driver_host, prediction_col, device

    def fit(self, df: Any) -> DlrmModel:
        """Trains on df's rows (one trainer per partition); blocks until the job ends."""
        spark = df.sparkSession
        _check_device(self.device)  # (an attribute set since construction)
        _require_gpu_tasks(spark.sparkContext.getConf(), self.device)
        host = _address(self.driver_host or spark.conf.get("spark.driver.host"))
        coordinator = f"{host}:{_free_port(host)}"
        job = _Job(self.config, self.columns, self.part_rows, self.holdout_parts,
                   self.servers, df.rdd.getNumPartitions(), coordinator, self.checkpoint_dir,
                   self.timeout_ms, self.device)
        group = f"libdlrm-fit-{coordinator}"
        roles = self._start_roles(job, host, lambda: spark.sparkContext.cancelJobGroup(group))
        try:
            spark.sparkContext.setJobGroup(group, "libdlrm trainers", True)
            outcomes = df.rdd.barrier().mapPartitions(
                lambda rows: _train_partition(job, rows)).collect()
        except Exception as e:
            self._join(roles)  # they end by timeout
            raise RuntimeError(f"libdlrm Spark job failed: {e}" + "".join(
                f"; {r.name}: {r.error}" for r in roles if r.error is not None)) from e
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
        self._join(roles)
        for r in roles:
            if r.error is not None:
                raise RuntimeError(f"{r.name} failed: {r.error}") from r.error
        return DlrmModel(self.checkpoint_dir, self.columns,
                         sorted(outcomes, key=lambda o: o.rank), self.prediction_col)

    def _start_roles(self, job: _Job, host: str, on_error: Any) -> List[_Role]:
        base = {"DLRM_WORLD_SIZE": job.servers + job.trainers,
                "DLRM_COORDINATOR": job.coordinator, "DLRM_BIND_ADDRESS": host,
                "DLRM_TIMEOUT_MS": job.timeout_ms}
        roles = [_Role("coordinator", job.config, dict(base, DLRM_ROLE="coordinator"),
                       on_error)]
        roles[0].start()
        threading.Event().wait(0.2)  # the coordinator binds before the servers pick ports
        for s in range(job.servers):
            roles.append(_Role(f"server {s}", job.config,
                               dict(base, DLRM_ROLE="server", DLRM_RANK=s), on_error))
            roles[-1].start()
        return roles

    def _join(self, roles: List[_Role]) -> None:
        for r in roles:
            r.join(timeout=2 * self.timeout_ms / 1000)
