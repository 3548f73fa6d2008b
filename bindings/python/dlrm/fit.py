"""Notebook conveniences: a training loop with a progress bar, and its History.

Nothing here is training logic: fit() only calls Engine.train_step / Engine.evaluate in
a loop and records what they return, converting Arrow and pandas input (dlrm.arrow) on a
thread one step ahead.
"""
from __future__ import annotations

import math
import queue
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, List, Optional, Sequence

import numpy as np

from . import arrow
from .arrow import Columns
from .batch import Batch

if TYPE_CHECKING:
    from .engine import Engine


@dataclass
class History:
    """What fit() observed.

    Attributes:
        loss: the mean batch loss of every train step, in order.
        epoch_end: len(loss) at the end of each epoch (where epochs start in ``loss``).
        eval_log_loss, eval_auc: one entry per epoch, when eval_batches were given.
    """

    loss: List[float] = field(default_factory=list)
    epoch_end: List[int] = field(default_factory=list)
    eval_log_loss: List[float] = field(default_factory=list)
    eval_auc: List[float] = field(default_factory=list)

    def plot(self, smoothing: int = 20) -> Any:
        """Plots the loss per step (and eval metrics per epoch); returns the Figure.

        ``smoothing``: window of the moving average drawn over the raw loss (1 = none).
        matplotlib is imported only here, so the package works without it.
        """
        try:
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise ImportError("History.plot() needs matplotlib: pip install matplotlib") from e
        import numpy as np
        from matplotlib.ticker import MaxNLocator

        has_eval = bool(self.eval_auc)
        fig, axes = plt.subplots(1, 2 if has_eval else 1, figsize=(11 if has_eval else 6, 4),
                                 squeeze=False)
        ax = axes[0][0]
        steps = np.arange(1, len(self.loss) + 1)
        ax.plot(steps, self.loss, alpha=0.35, linewidth=0.8, label="batch loss")
        window = max(1, min(int(smoothing), len(self.loss)))
        if window > 1:
            smooth = np.convolve(self.loss, np.ones(window) / window, mode="valid")
            ax.plot(steps[window - 1:], smooth, label=f"mean of {window}")
        for end in self.epoch_end[:-1]:
            ax.axvline(end + 0.5, color="gray", linestyle=":", linewidth=0.8)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (BCE)")
        ax.legend()
        if has_eval:
            ax = axes[0][1]
            epochs = np.arange(1, len(self.eval_auc) + 1)
            ax.plot(epochs, self.eval_auc, marker="o", color="C2", label="AUC")
            ax.set_xlabel("epoch")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_ylabel("eval AUC")
            twin = ax.twinx()
            twin.plot(epochs, self.eval_log_loss, marker="s", color="C3", label="log loss")
            twin.set_ylabel("eval log loss")
            ax.legend(handles=ax.get_lines() + twin.get_lines(), loc="best")
        fig.tight_layout()
        return fig


def fit(engine: "Engine", batches: Iterable[Any], epochs: int = 1,
        eval_batches: Optional[Iterable[Any]] = None, progress: bool = True,
        columns: Optional[Columns] = None, shuffle: bool = False, seed: int = 0) -> History:
    """Trains ``engine`` on ``batches`` for ``epochs`` passes; returns a History.

    Args:
        batches: Batch objects; with ``columns``, also pyarrow RecordBatches or Tables and
            pandas DataFrames, or a ``pyarrow.dataset.Dataset`` (Parquet files: streamed
            record batch by record batch). Other than Batches, items are converted on a
            thread one step ahead of training. For epochs > 1 it must be re-iterable (a
            list, a Dataset, or an object whose __iter__ starts over), not a one-shot
            iterator or generator.
        eval_batches: evaluated after every epoch (read once, kept for all epochs); the
            same kinds of items as ``batches``. Its metrics show in the progress bar.
        progress: show a tqdm progress bar with the running loss.
        columns: which Arrow/pandas column is which (:class:`dlrm.Columns`).
        shuffle: visit the batches (a Dataset: its files) in a new order each epoch, drawn
            from ``seed`` and the epoch; needs a sized sequence or a Dataset.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    source = _Source(batches, columns, shuffle, seed)
    if epochs > 1 and source.one_shot:
        raise ValueError("batches is a one-shot iterator; pass a list (or another "
                         "re-iterable) to train for several epochs")
    eval_list = (None if eval_batches is None else
                 [_as_batch(b, columns) for b in eval_batches])
    tqdm = _tqdm() if progress else None
    history = History()
    for epoch in range(epochs):
        bar = None
        iterator: Iterable[Batch] = source.epoch(epoch)
        if tqdm is not None:
            bar = tqdm(iterator, total=source.total, desc=f"epoch {epoch + 1}/{epochs}",
                       unit="batch")
            iterator = bar
        try:
            running = _train_epoch(engine, iterator, history, bar)
            if eval_list:
                _evaluate(engine, eval_list, history, bar, running)
        finally:
            if bar is not None:
                bar.close()
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
    return history


def _tqdm() -> Any:
    try:
        from tqdm.auto import tqdm
    except ImportError as e:
        raise ImportError("fit(progress=True) needs tqdm: pip install tqdm, or pass "
                          "progress=False") from e
    return tqdm


def _train_epoch(engine: "Engine", iterator: Iterable[Batch], history: History,
                 bar: Any) -> float:
    """Returns the running loss at the epoch's end."""
    running = math.nan
    for batch in iterator:
        loss = engine.train_step(batch)
        history.loss.append(loss)
        # An exponential average: the raw batch loss is too noisy to read.
        running = loss if math.isnan(running) else 0.9 * running + 0.1 * loss
        if bar is not None:
            bar.set_postfix(loss=f"{running:.4f}", refresh=False)
    history.epoch_end.append(len(history.loss))
    return running


def _evaluate(engine: "Engine", eval_list: List[Batch], history: History, bar: Any,
              running: float) -> None:
    result = engine.evaluate(eval_list)
    history.eval_log_loss.append(result.log_loss)
    history.eval_auc.append(result.auc)
    if bar is not None:
        bar.set_postfix(loss=f"{running:.4f}", eval_auc=f"{result.auc:.4f}", eval_log_loss=f"{result.log_loss:.4f}")


def _as_batch(item: Any, columns: Optional[Columns]) -> Batch:
    """A Batch as is; Arrow and pandas data through ``columns``."""
    if isinstance(item, Batch):
        return item
    if columns is None:
        raise TypeError(f"fit got a {type(item).__name__}, not a dlrm.Batch: pass "
                        f"columns=dlrm.Columns(...) to name its columns")
    if type(item).__module__.startswith("pandas"):
        return arrow.from_pandas(item, columns)
    return arrow.from_arrow(item, columns)


class _Source:
    """The epochs' items: in order or shuffled, converted one step ahead on a thread."""

    def __init__(self, batches: Iterable[Any], columns: Optional[Columns], shuffle: bool,
                 seed: int) -> None:
        self._dataset = _is_dataset(batches)
        self._batches, self._columns, self._shuffle, self._seed = batches, columns, shuffle, seed
        self.one_shot = not self._dataset and iter(batches) is batches
        self.total = (None if self._dataset or not hasattr(batches, "__len__")
                      else len(batches))  # type: ignore[arg-type]
        if shuffle and not self._dataset and not isinstance(batches, Sequence):
            raise ValueError("shuffle=True needs a sized sequence of batches (a list) or a "
                             "pyarrow.dataset.Dataset")

    def epoch(self, epoch: int) -> Iterator[Batch]:
        order = np.random.default_rng([self._seed, epoch]) if self._shuffle else None
        if self._dataset:
            fragments = list(self._batches.get_fragments())  # type: ignore[attr-defined]
            if order is not None:
                fragments = [fragments[i] for i in order.permutation(len(fragments))]
            items: Iterable[Any] = (b for f in fragments for b in f.to_batches())
        elif order is not None:
            seq = self._batches
            items = (seq[i] for i in order.permutation(len(seq)))  # type: ignore
        else:
            items = self._batches
        if self._columns is None:
            return (_as_batch(b, None) for b in items)
        return _read_ahead(items, lambda b: _as_batch(b, self._columns))


def _is_dataset(batches: object) -> bool:
    return type(batches).__module__.startswith("pyarrow") and hasattr(batches, "get_fragments")


_DONE = object()


def _read_ahead(items: Iterable[Any], convert: Callable[[Any], Batch]) -> Iterator[Batch]:
    """convert(item) for each item, on a thread that runs up to 2 items ahead; an error
    there is raised here, in order. Closing the generator stops the thread."""
    out: "queue.Queue[Any]" = queue.Queue(maxsize=2)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                out.put((convert(item), None))
        except BaseException as e:  # noqa: B902 - handed to the consumer
            out.put((None, e))
        out.put((_DONE, None))

    thread = threading.Thread(target=produce, name="dlrm-fit-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            value, error = out.get()
            if error is not None:
                raise error
            if value is _DONE:
                return
            yield value
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                out.get(timeout=0.05)
            except queue.Empty:
                pass
        thread.join()
