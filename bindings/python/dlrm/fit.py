"""Notebook conveniences: a training loop with a progress bar, and its History.

Nothing here is training logic: fit() only calls Engine.train_step / Engine.evaluate in
a loop and records what they return.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, List, Optional

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


def fit(engine: "Engine", batches: Iterable[Batch], epochs: int = 1,
        eval_batches: Optional[Iterable[Batch]] = None, progress: bool = True) -> History:
    """Trains ``engine`` on ``batches`` for ``epochs`` passes; returns a History.

    Args:
        batches: Batch objects. For epochs > 1 it must be re-iterable (a list, or an
            object whose __iter__ starts over), not a one-shot iterator or generator.
        eval_batches: evaluated after every epoch (read once, kept for all epochs).
        progress: show a tqdm progress bar with the running loss.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if epochs > 1 and iter(batches) is batches:
        raise ValueError("batches is a one-shot iterator; pass a list (or another "
                         "re-iterable) to train for several epochs")
    eval_list = None if eval_batches is None else list(eval_batches)
    if progress:
        try:
            from tqdm.auto import tqdm
        except ImportError as e:
            raise ImportError("fit(progress=True) needs tqdm: pip install tqdm, or pass "
                              "progress=False") from e
    history = History()
    total = len(batches) if hasattr(batches, "__len__") else None  # type: ignore[arg-type]
    for epoch in range(epochs):
        bar = None
        iterator: Iterable[Batch] = batches
        if progress:
            bar = tqdm(batches, total=total, desc=f"epoch {epoch + 1}/{epochs}", unit="batch")
            iterator = bar
        running = math.nan
        try:
            for batch in iterator:
                loss = engine.train_step(batch)
                history.loss.append(loss)
                # An exponential average: the raw batch loss is too noisy to read.
                running = loss if math.isnan(running) else 0.9 * running + 0.1 * loss
                if bar is not None:
                    bar.set_postfix(loss=f"{running:.4f}", refresh=False)
            history.epoch_end.append(len(history.loss))
            if eval_list:
                result = engine.evaluate(eval_list)
                history.eval_log_loss.append(result.log_loss)
                history.eval_auc.append(result.auc)
                if bar is not None:
                    bar.set_postfix(loss=f"{running:.4f}", eval_auc=f"{result.auc:.4f}",
                                    eval_log_loss=f"{result.log_loss:.4f}")
        finally:
            if bar is not None:
                bar.close()
    return history
