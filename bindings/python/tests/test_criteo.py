"""dlrm.criteo reads Criteo TSV exactly as the `dlrm` command does: training on its
batches gives bitwise the parameters `dlrm train` saves; malformed lines get the
command's message, or are skipped and counted."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import dlrm
from dlrm.criteo import CriteoReader, table_rows_of
from conftest import same_bits

ROOT = Path(__file__).resolve().parents[3]
DEMO = (ROOT / "tools" / "configs" / "demo.pbtxt").read_text()


def cli() -> Path:
    command = Path(os.environ["DLRM_LIBRARY"]).parent / "dlrm"
    if not command.is_file():
        pytest.skip(f"no dlrm command beside DLRM_LIBRARY ({command})")
    return command


def test_training_on_the_reader_equals_dlrm_train_bitwise(tmp_path):
    subprocess.run([str(cli()), "generate", f"--out_dir={tmp_path}", "--train_samples=1500",
                    "--test_samples=10"], check=True, capture_output=True)
    config = tmp_path / "demo.pbtxt"
    config.write_text(DEMO)
    subprocess.run([str(cli()), "train", f"--config={config}", f"--train={tmp_path}/train.tsv",
                    "--batch_size=256", f"--save={tmp_path}/cli.ckpt"], check=True,
                   capture_output=True)
    with dlrm.Engine(DEMO) as engine, dlrm.Engine.from_checkpoint(tmp_path / "cli.ckpt") as cli_engine:
        reader = CriteoReader.for_engine(tmp_path / "train.tsv", engine, batch_size=256)
        sizes = [engine.train_step(b) and len(b) for b in reader]
        assert sum(sizes) == 1500 and sizes[-1] == 1500 % 256  # the last batch is partial
        assert engine.step == cli_engine.step == 6
        for name in engine.parameter_names():
            assert same_bits(engine.get_parameter(name), cli_engine.get_parameter(name)), name


def line(label="1", dense=("1",) * 13, cats=("a1",) * 26) -> bytes:
    return "\t".join([label, *dense, *cats]).encode() + b"\n"


def test_values_are_preprocessed_as_the_command_does(tmp_path):
    rows = list(range(1, 27))
    path = tmp_path / "x.tsv"
    dense = ("", "0", "-3", "+7", "1000000") + ("2",) * 8
    cats = ("", "FF", "ffffffffffffffff") + ("10",) * 23
    path.write_bytes(line("0", dense, cats) + line().replace(b"\n", b"\r\n"))
    (b0, ) = list(CriteoReader(path, rows, batch_size=2))
    assert b0.labels.tolist() == [0, 1]
    want = np.float32([0, 0, 0, np.log1p(7.0), np.log1p(1e6)] + [np.log1p(2.0)] * 8)
    assert same_bits(b0.dense[0], want)
    assert b0.lengths[:, 0].tolist() == [0] + [1] * 25  # C1 empty: an empty bag
    # Feature-major: C1 of row 1, then C2 of rows 0 and 1, then C3 of rows 0 and 1.
    assert b0.ids[:5].tolist() == [0xA1 % 1, 0xFF % 2, 0xA1 % 2, 0xFFFFFFFFFFFFFFFF % 3,
                                   0xA1 % 3]
    raw = CriteoReader(path, [0] * 26, batch_size=1)
    assert next(iter(raw)).ids[1].tolist() == -1  # 16 hex digits as an int64


@pytest.mark.parametrize("bad,message", [
    (line("2"), "label: expected 0 or 1, got '2'"),
    (line(dense=("1",) * 12 + ("x1",)), "I13: not an integer: 'x1'"),
    (line(dense=("9" * 20,) + ("1",) * 12), "I1: integer out of range: '" + "9" * 20 + "'"),
    (line(cats=("g",) + ("a",) * 25), "C1: not 1 to 16 hex digits: 'g'"),
    (b"1\t2\n", "line: expected 40 tab-separated fields, found 2"),
])
def test_malformed_lines_are_named_or_skipped(tmp_path, bad, message):
    path = tmp_path / "bad.tsv"
    path.write_bytes(line() + bad + line())
    with pytest.raises(ValueError, match=f"^{path}:2: " + message.replace("+", r"\+")):
        list(CriteoReader(path, list(range(1, 27))))
    reader = CriteoReader(path, list(range(1, 27)), skip_malformed=True)
    assert sum(len(b) for b in reader) == 2
    assert (reader.lines_read, reader.lines_skipped) == (3, 1)


def test_table_rows_come_from_the_config():
    rows = table_rows_of(DEMO)
    assert len(rows) == 26 and rows[0] == 1000 and rows[1] == 583
    with pytest.raises(ValueError, match="table_rows must be 26"):
        CriteoReader("x", [1] * 3)
