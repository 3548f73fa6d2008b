"""A Python program outside the libdlrm repository (outside_test.sh), in a venv."""
import sys

import numpy as np

import dlrm

with dlrm.Engine(open(sys.argv[1]).read()) as engine:
    batch = dlrm.Batch(np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], np.float32),
                       np.array([1, 0], np.float32), np.array([[1, 1], [1, 0]], np.int32),
                       np.array([4, 9, 2], np.int64))
    engine.train_step(batch)
    print(f"python app: dlrm {dlrm.__version__} from {dlrm.library_path()} predicts "
          f"{len(engine.predict(batch))} probabilities")
