"""The GIL is released during calls: concurrent predictions from Python threads.

Results must equal the serial ones bitwise. Timing is not asserted (2 shared cores make
speedups unreliable); that the calls drop the GIL is checked structurally in
test_library.py::test_library_releases_the_gil.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from conftest import make_batch, same_bits

import dlrm

ROWS = (5000, 5000, 2000, 1000)
BIG_CONFIG = """
model {
  num_dense_features: 13
  tables { name: 'a' num_rows: 5000 dim: 32 }
  tables { name: 'b' num_rows: 5000 dim: 32 }
  tables { name: 'c' num_rows: 2000 dim: 32 }
  tables { name: 'd' num_rows: 1000 dim: 32 }
  sparse_features { name: 'a' table: 'a' }
  sparse_features { name: 'b' table: 'b' pooling: MEAN }
  sparse_features { name: 'c' table: 'c' }
  sparse_features { name: 'd' table: 'd' }
  bottom_mlp { layer_sizes: 256 layer_sizes: 128 layer_sizes: 32 }
  top_mlp { layer_sizes: 256 layer_sizes: 128 layer_sizes: 1 }
}
dense_optimizer { learning_rate: 0.01 adagrad {} }
sparse_optimizer { learning_rate: 0.05 adagrad {} }
seed: 3 num_threads: 1
"""


def _batches(n, batch_size=1024):
    rng = np.random.default_rng(99)
    return [make_batch(rng, batch_size=batch_size, num_dense=13, rows=ROWS, max_len=4,
                       weights=True) for _ in range(n)]


def test_concurrent_predict_equals_serial():
    batches = _batches(4)
    with dlrm.Engine(BIG_CONFIG) as engine:
        for b in batches[:2]:
            engine.train_step(b)
        serial = [engine.predict(b) for b in batches]
        start = threading.Barrier(4)

        def work(i):
            start.wait()  # all four threads enter predict together
            return [engine.predict(batches[(i + k) % 4]) for k in range(4)]

        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(work, range(4)))
        for i, outputs in enumerate(results):
            for k, out in enumerate(outputs):
                assert same_bits(out, serial[(i + k) % 4]), (i, k)
        # Evaluate (also a reader) concurrently with predictions.
        with ThreadPoolExecutor(max_workers=2) as pool:
            ev = pool.submit(engine.evaluate, batches)
            pr = pool.submit(engine.predict, batches[0])
            assert same_bits(pr.result(), serial[0])
            assert ev.result().num_samples == 4 * 1024


def test_training_alongside_predictions_is_safe():
    batches = _batches(3, batch_size=256)
    with dlrm.Engine(BIG_CONFIG) as engine:
        errors = []

        def predict_loop():
            try:
                for _ in range(10):
                    p = engine.predict(batches[0])
                    assert p.shape == (256,) and np.all((p > 0) & (p < 1))
            except BaseException as e:  # noqa: BLE001  (reported below)
                errors.append(e)

        readers = [threading.Thread(target=predict_loop) for _ in range(3)]
        for t in readers:
            t.start()
        for _ in range(5):
            engine.train_step(batches[1])
        for t in readers:
            t.join()
        assert not errors
        assert engine.step == 5


# A daemon thread predicts in a loop; the main thread exits without close(). The engine's
# exit-time backstop must wait for the call in flight and make the next one raise, not
# destroy the engine under it.
_EXIT_SCRIPT = """
import threading
from test_threads import BIG_CONFIG, _batches
import dlrm

engine = dlrm.Engine(BIG_CONFIG)
batch = _batches(1)[0]
predicted = threading.Semaphore(0)

def predict_forever():
    try:
        while True:
            engine.predict(batch)
            predicted.release()
    except dlrm.EngineClosedError:
        pass

for _ in range(2):
    threading.Thread(target=predict_forever, daemon=True).start()
for _ in range(4):
    predicted.acquire()
print("exiting", flush=True)
"""


def test_exit_with_a_daemon_thread_predicting_on_an_unclosed_engine():
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    for _ in range(3):
        run = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT], cwd=Path(__file__).parent,
                             env=env, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, (run.returncode, run.stderr)
        assert run.stdout == "exiting\n" and "Traceback" not in run.stderr, run.stderr
