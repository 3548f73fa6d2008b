"""ctest python_pip_install: `pip install` the package, then use it from the install.

1. pip install --no-deps --no-build-isolation --target <tmp> bindings/python, with
   DLRM_LIBRARY set so setup.py bundles that library into dlrm/_lib/;
   with every shared library it loads but the base system's beside it (checked with ldd);
2. in a fresh interpreter with DLRM_LIBRARY unset and <tmp> on sys.path, import dlrm
   (it must come from <tmp> and load the bundled library), create an engine, predict;
3. run the `dlrm` console script pip put in <tmp>/bin (the bundled command);
4. check the build wrote nothing into the source tree.

Not collected by pytest (it is no test_*.py): it installs, so it runs once, on its own.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1]

USE_INSTALLED = r"""
import sys
from pathlib import Path
import numpy as np
import dlrm

target = Path(sys.argv[1]).resolve()
assert Path(dlrm.__file__).resolve().is_relative_to(target), dlrm.__file__
lib = Path(dlrm.library_path()).resolve()
assert lib.parent == target / "dlrm" / "_lib", lib
assert dlrm.library_abi_version() == dlrm.ABI_VERSION == 1
config = '''
model {
  num_dense_features: 2
  tables { name: 't' num_rows: 10 dim: 4 }
  sparse_features { name: 'f' table: 't' }
  bottom_mlp { layer_sizes: 4 }
  top_mlp { layer_sizes: 4 layer_sizes: 1 }
}
'''
with dlrm.Engine(config) as engine:
    batch = dlrm.Batch(np.ones((3, 2), np.float32), np.array([0, 1, 1], np.float32),
                       np.array([[1, 0, 2]], np.int32), np.array([1, 2, 3], np.int64))
    engine.train_step(batch)
    p = engine.predict(batch)
    assert p.shape == (3,) and np.all((p > 0) & (p < 1)), p
print(f"pip install check: dlrm {dlrm.__version__} from {target}, library {lib.name}: OK")
"""


def _snapshot(root: Path) -> set:
    # __pycache__ is left out: suites running beside this one may write it; pip does not.
    return {str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts}


def _command_runs(target: Path, env: dict, tmp: Path) -> bool:
    """The `dlrm` console script pip installed runs the bundled command."""
    script = target / "bin" / "dlrm"
    if not script.is_file():
        print(f"pip installed no `dlrm` command at {script}", file=sys.stderr)
        return False
    run = subprocess.run([str(script), "generate", f"--out_dir={tmp / 'data'}",
                          "--train_samples=50", "--test_samples=5"],
                         env=env, capture_output=True, text=True, timeout=120)
    if run.returncode != 0 or not (tmp / "data" / "train.tsv").is_file():
        print(run.stdout, run.stderr, "the installed `dlrm generate` failed", sep="\n",
              file=sys.stderr)
        return False
    print(f"pip install check: {script} generate: OK")
    return True


def main() -> int:
    library = os.environ.get("DLRM_LIBRARY")
    if not library:
        print("DLRM_LIBRARY must name the libdlrm.so to bundle", file=sys.stderr)
        return 2
    before = _snapshot(SOURCE)
    with tempfile.TemporaryDirectory(prefix="dlrm-pip-") as tmp:
        target = Path(tmp) / "site"
        install = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
             "--no-cache-dir", "--disable-pip-version-check", "--no-input",
             "--target", str(target), str(SOURCE)],
            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
            capture_output=True, text=True, timeout=600)
        if install.returncode != 0:
            print(install.stdout, install.stderr, sep="\n", file=sys.stderr)
            print("pip install failed", file=sys.stderr)
            return 1
        bundled = sorted((target / "dlrm" / "_lib").glob("libdlrm.so*"))
        if not bundled:
            print(f"no libdlrm bundled under {target}/dlrm/_lib", file=sys.stderr)
            return 1
        # Every library there loads its dependencies from there or the base system.
        if subprocess.run([sys.executable, str(SOURCE.parents[1] / "scripts" /
                                               "bundle_runtime.py"), "check",
                           str(target / "dlrm" / "_lib")]).returncode != 0:
            return 1
        env = {k: v for k, v in os.environ.items()
               if k not in ("DLRM_LIBRARY", "PYTHONPATH", "PYTHONSTARTUP")}
        env.update(PYTHONPATH=str(target), PYTHONDONTWRITEBYTECODE="1")
        use = subprocess.run([sys.executable, "-c", USE_INSTALLED, str(target)], cwd=tmp,
                             env=env, capture_output=True, text=True, timeout=120)
        print(use.stdout, end="")
        if use.returncode != 0:
            print(use.stderr, file=sys.stderr)
            return 1
        if not _command_runs(target, env, Path(tmp)):
            return 1
    created = sorted(_snapshot(SOURCE) - before)
    if created:
        print(f"the install wrote into the source tree: {created}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
