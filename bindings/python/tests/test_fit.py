"""fit() on a learnable synthetic task, and History.plot()."""
from __future__ import annotations

import numpy as np
import pytest

import dlrm

CONFIG = """
model {
  num_dense_features: 2
  tables { name: 'item' num_rows: 100 dim: 8 }
  sparse_features { name: 'item' table: 'item' }
  bottom_mlp { layer_sizes: 16 layer_sizes: 8 }
  top_mlp { layer_sizes: 16 layer_sizes: 1 }
}
dense_optimizer { learning_rate: 0.01 adam {} }
sparse_optimizer { learning_rate: 0.1 adagrad {} }
seed: 5 num_threads: 2
"""


def _task(rng, num_batches, batch_size=128):
    """Click iff dense[:, 0] + a per-item effect > 0: learnable from both inputs."""
    effect = np.where(np.arange(100) % 2 == 0, 1.5, -1.5).astype(np.float32)
    batches = []
    for _ in range(num_batches):
        dense = rng.standard_normal((batch_size, 2), dtype=np.float32)
        ids = rng.integers(0, 100, size=batch_size, dtype=np.int64)
        labels = (dense[:, 0] + effect[ids] > 0).astype(np.float32)
        lengths = np.ones((1, batch_size), np.int32)
        batches.append(dlrm.Batch(dense, labels, lengths, ids))
    return batches


def test_fit_learns(capsys):
    rng = np.random.default_rng(0)
    train, held_out = _task(rng, 40), _task(rng, 4)
    with dlrm.Engine(CONFIG) as engine:
        history = dlrm.fit(engine, train, epochs=3, eval_batches=held_out, progress=True)
        assert engine.step == 120
    assert len(history.loss) == 120 and history.epoch_end == [40, 80, 120]
    assert np.mean(history.loss[-10:]) < 0.6 * np.mean(history.loss[:10])
    assert len(history.eval_auc) == 3 and len(history.eval_log_loss) == 3
    assert history.eval_auc[-1] > 0.9
    assert history.eval_log_loss[-1] < history.eval_log_loss[0]
    assert "epoch 3/3" in capsys.readouterr().err  # tqdm writes to stderr


def test_engine_fit_without_progress_or_eval(capsys):
    rng = np.random.default_rng(1)
    with dlrm.Engine(CONFIG) as engine:
        history = engine.fit(iter(_task(rng, 5)), progress=False)
    assert len(history.loss) == 5 and history.eval_auc == []
    assert capsys.readouterr().err == ""


def test_fit_refuses_one_shot_iterator_for_several_epochs():
    rng = np.random.default_rng(2)
    with dlrm.Engine(CONFIG) as engine:
        with pytest.raises(ValueError, match="one-shot iterator"):
            dlrm.fit(engine, iter(_task(rng, 2)), epochs=2)
        with pytest.raises(ValueError, match="epochs must be >= 1"):
            dlrm.fit(engine, _task(rng, 2), epochs=0)
        assert engine.step == 0


def test_history_plot():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = dlrm.History(loss=list(np.linspace(0.7, 0.2, 50)), epoch_end=[25, 50],
                           eval_log_loss=[0.5, 0.3], eval_auc=[0.8, 0.9])
    fig = history.plot()
    try:
        assert len(fig.axes) == 3  # loss, AUC and its twin for log loss
        assert fig.axes[0].get_xlabel() == "step"
    finally:
        plt.close(fig)
    fig = dlrm.History(loss=[0.7, 0.6, 0.5]).plot()
    try:
        assert len(fig.axes) == 1
    finally:
        plt.close(fig)


def test_history_plot_without_matplotlib(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        dlrm.History(loss=[0.5]).plot()
