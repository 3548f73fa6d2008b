#!/usr/bin/env python3
"""The peer of `dlrm bench`: the same DLRM models and data shape in PyTorch.

The model is the DLRM reference implementation's shape: one ``nn.EmbeddingBag`` per
table (sum pooling, ``sparse=True`` gradients), bottom and top MLPs of ``nn.Linear`` +
``nn.ReLU``, the DOT interaction as ``bmm`` plus the strict lower triangle (or CAT, or
CAT followed by DCNv2's cross network: TorchRec's ``LowRankCrossNet`` written out), and
``BCEWithLogitsLoss``. The optimizer is ``torch.optim.SGD`` or ``torch.optim.Adagrad``
over every parameter (both accept sparse embedding gradients).

It reads the engine's own config files (bench/configs/*.pbtxt), so the two sides cannot
drift apart, and draws the same data shape as `dlrm bench`: ids Zipf(s) % num_rows
(numpy's Zipf over the ranks 1, 2, ...; id 0 is the hottest row), bags of exactly
bag_size ids (or, with --bag_size -1, each feature's pooling_factor: MLPerf's multi-hot
sizes), dense features log1p of a log-normal count, Bernoulli(0.25) labels. --max_rows
caps every table as `dlrm bench --max_rows` does.

Two modes:

  throughput (default): warm-up, then `--windows` windows of train steps and as many
      of predict calls; prints the median samples/s of each and a line
      ``RESULT train=<samples/s> predict=<samples/s>`` that bench/compare.sh reads.
  --curve N: trains the engine (through the Python binding, bindings/python) and PyTorch
      from the *same initial weights* on the *same* N batches of learnable data and
      prints both losses side by side. Needs libdlrm.so ($DLRM_LIBRARY or installed).

PyTorch is an optional benchmark dependency (Debian's python3-torch or PyPI), never a
test one.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

try:
    import torch
    from torch import nn
except ImportError:  # pragma: no cover - a clear message instead of a traceback
    sys.exit("torch_reference.py needs PyTorch: apt-get install python3-torch "
             "(then run it with /usr/bin/python3) or pip install torch")


# ---- the engine's config, the few fields the model needs -------------------------
@dataclass
class Table:
    name: str
    rows: int
    dim: int


@dataclass
class ModelSpec:
    num_dense: int = 0
    tables: List[Table] = field(default_factory=list)
    feature_tables: List[int] = field(default_factory=list)  # table index per feature
    feature_bags: List[int] = field(default_factory=list)  # pooling_factor per feature
    bottom: List[int] = field(default_factory=list)
    top: List[int] = field(default_factory=list)
    interaction: str = "DOT"
    dcn_layers: int = 3
    dcn_rank: int = 0  # 0: full rank
    dense_lr: float = 0.01
    sparse_lr: float = 0.01


def _block(text: str, name: str) -> str:
    """The body of the first top-level-or-nested `name { ... }` block (braces balanced)."""
    m = re.search(r"\b%s\s*\{" % re.escape(name), text)
    if not m:
        return ""
    depth, i = 1, m.end()
    while depth and i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[m.end():i - 1]


def parse_config(path: str) -> ModelSpec:
    """Reads the subset of engine/config/dlrm.proto text format the bench configs use."""
    text = "\n".join(line.split("#", 1)[0] for line in open(path, encoding="utf-8"))
    model = _block(text, "model")
    spec = ModelSpec()
    spec.num_dense = int(re.search(r"num_dense_features:\s*(\d+)", model).group(1))
    for body in re.findall(r"tables\s*\{([^}]*)\}", model):
        spec.tables.append(Table(re.search(r'name:\s*"([^"]+)"', body).group(1),
                                 int(re.search(r"num_rows:\s*(\d+)", body).group(1)),
                                 int(re.search(r"dim:\s*(\d+)", body).group(1))))
    by_name = {t.name: i for i, t in enumerate(spec.tables)}
    for body in re.findall(r"sparse_features\s*\{([^}]*)\}", model):
        if "MEAN" in body:
            sys.exit(f"{path}: MEAN pooling is not mirrored here")
        spec.feature_tables.append(by_name[re.search(r'table:\s*"([^"]+)"', body).group(1)])
        m = re.search(r"pooling_factor:\s*([0-9.eE+-]+)", body)
        spec.feature_bags.append(int(round(float(m.group(1)))) if m else 1)
    spec.bottom = [int(v) for v in re.findall(r"layer_sizes:\s*(\d+)", _block(model, "bottom_mlp"))]
    spec.top = [int(v) for v in re.findall(r"layer_sizes:\s*(\d+)", _block(model, "top_mlp"))]
    m = re.search(r"interaction:\s*(\w+)", model)
    spec.interaction = m.group(1) if m else "DOT"
    dcn = _block(model, "dcn")
    m = re.search(r"num_layers:\s*(\d+)", dcn)
    spec.dcn_layers = int(m.group(1)) if m else 3
    m = re.search(r"rank:\s*(\d+)", dcn)
    spec.dcn_rank = int(m.group(1)) if m else 0
    for key in ("dense_optimizer", "sparse_optimizer"):
        m = re.search(r"learning_rate:\s*([0-9.eE+-]+)", _block(text, key))
        if m:
            setattr(spec, key.split("_")[0] + "_lr", float(m.group(1)))
    return spec


# ---- the model -------------------------------------------------------------------
def mlp(in_dim: int, sizes: List[int], relu_last: bool) -> nn.Sequential:
    layers: List[nn.Module] = []
    for i, out in enumerate(sizes):
        layers.append(nn.Linear(in_dim, out))
        if i + 1 < len(sizes) or relu_last:
            layers.append(nn.ReLU())
        in_dim = out
    return nn.Sequential(*layers)


class CrossNet(nn.Module):
    """DCNv2: x_{l+1} = x0 * (U_l (V_l x_l) + b_l) + x_l, or W_l x_l at rank 0."""

    def __init__(self, dim: int, layers: int, rank: int):
        super().__init__()
        if rank == 0:
            self.v = nn.ModuleList(nn.Linear(dim, dim, bias=True) for _ in range(layers))
            self.u = None
        else:
            self.v = nn.ModuleList(nn.Linear(dim, rank, bias=False) for _ in range(layers))
            self.u = nn.ModuleList(nn.Linear(rank, dim, bias=True) for _ in range(layers))

    def forward(self, x0: torch.Tensor) -> torch.Tensor:
        x = x0
        for layer in range(len(self.v)):
            y = self.v[layer](x) if self.u is None else self.u[layer](self.v[layer](x))
            x = x0 * y + x
        return x


class Dlrm(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        self.embeddings = nn.ModuleList(
            nn.EmbeddingBag(t.rows, t.dim, mode="sum", sparse=True) for t in spec.tables)
        for emb, t in zip(self.embeddings, spec.tables):  # the DLRM reference's init
            bound = 1.0 / np.sqrt(t.rows)
            nn.init.uniform_(emb.weight, -bound, bound)
        self.bottom = mlp(spec.num_dense, spec.bottom, relu_last=True)
        num_f = len(spec.feature_tables)
        d = spec.bottom[-1]
        if spec.interaction == "DOT":
            inter_dim = d + num_f * (num_f + 1) // 2
            li, lj = torch.tril_indices(num_f + 1, num_f + 1, offset=-1)
            self.register_buffer("li", li, persistent=False)
            self.register_buffer("lj", lj, persistent=False)
        else:
            inter_dim = d + sum(spec.tables[t].dim for t in spec.feature_tables)
        self.cross = (CrossNet(inter_dim, spec.dcn_layers, spec.dcn_rank)
                      if spec.interaction == "DCN" else None)
        self.top = mlp(inter_dim, spec.top, relu_last=False)

    def forward(self, dense: torch.Tensor, ids: List[torch.Tensor]) -> torch.Tensor:
        x = self.bottom(dense)
        pooled = [self.embeddings[t](ids[f]) for f, t in enumerate(self.spec.feature_tables)]
        if self.spec.interaction == "DOT":
            z = torch.cat([x] + pooled, dim=1).view(x.shape[0], -1, x.shape[1])
            zz = torch.bmm(z, z.transpose(1, 2))
            r = torch.cat([x, zz[:, self.li, self.lj]], dim=1)
        else:
            r = torch.cat([x] + pooled, dim=1)
            if self.cross is not None:
                r = self.cross(r)
        return self.top(r).squeeze(1)


def make_optimizer(model: Dlrm, kind: str, spec: ModelSpec) -> torch.optim.Optimizer:
    groups = [{"params": list(model.embeddings.parameters()), "lr": spec.sparse_lr},
              {"params": [p for name, p in model.named_parameters()
                          if not name.startswith("embeddings.")],
               "lr": spec.dense_lr}]
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=spec.dense_lr)
    if kind == "adagrad":
        return torch.optim.Adagrad(groups, lr=spec.dense_lr, eps=1e-10)
    sys.exit(f"unknown optimizer {kind!r} (sgd or adagrad)")


# ---- data ------------------------------------------------------------------------
def make_batch(spec: ModelSpec, rng: np.random.Generator, batch_size: int, bag: int,
               zipf: float, learnable: bool = False):
    """dense [B, num_dense] float32, labels [B] float32, ids [F][B, bag] int64."""
    ids = []
    for f, t in enumerate(spec.feature_tables):
        rows = spec.tables[t].rows
        size = (batch_size, spec.feature_bags[f] if bag < 0 else bag)
        if zipf > 0:
            ranks = rng.zipf(zipf, size=size).astype(np.uint64)
            ids.append(((ranks - 1) % rows).astype(np.int64))
        else:
            ids.append(rng.integers(0, rows, size=size, dtype=np.int64))
    dense = np.log1p(np.exp(1.0 + 1.5 * rng.standard_normal((batch_size, spec.num_dense))))
    dense = dense.astype(np.float32)
    if learnable:
        # A planted signal both sides can learn: a hash of the hottest feature's ids plus
        # the first dense feature decides the click probability.
        score = 0.8 * (dense[:, 0] - 1.5) + np.where(ids[0][:, 0] % 3 == 0, 1.0, -1.0)
        labels = (rng.random(batch_size) < 1 / (1 + np.exp(-score))).astype(np.float32)
    else:
        labels = (rng.random(batch_size) < 0.25).astype(np.float32)
    return dense, labels, ids


def to_torch(batch, device: torch.device = torch.device("cpu"), pin: bool = False):
    """The batch's tensors on `device` (on the host in pinned memory if `pin`)."""
    def tensor(a):
        t = torch.from_numpy(a)
        return t.pin_memory() if pin else t.to(device)
    dense, labels, ids = batch
    return tensor(dense), tensor(labels), [tensor(i) for i in ids]


def to_device(batch, device: torch.device):
    """A pinned host batch copied to `device` as a training loop does (non-blocking)."""
    dense, labels, ids = batch
    return (dense.to(device, non_blocking=True), labels.to(device, non_blocking=True),
            [i.to(device, non_blocking=True) for i in ids])


# ---- throughput ------------------------------------------------------------------
def throughput(args, spec: ModelSpec) -> None:
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    t0 = time.perf_counter()
    model = Dlrm(spec).to(device)
    build_s = time.perf_counter() - t0
    opt = make_optimizer(model, args.optimizer, spec)
    loss_fn = nn.BCEWithLogitsLoss()
    rng = np.random.default_rng(args.seed)
    # Device-resident batches by default (no copy is timed); with --host_batches each step
    # copies its batch from pinned host memory, as the engine does (its batches are host
    # memory) and as a DataLoader with pin_memory feeds a training loop.
    host = args.host_batches and device.type == "cuda"
    pool = [to_torch(make_batch(spec, rng, args.batch_size, args.bag_size, args.zipf), device,
                     pin=host)
            for _ in range(args.pool_batches)]

    def batch(i: int):
        b = pool[i % len(pool)]
        return to_device(b, device) if host else b

    def sync() -> None:  # a window ends when the device's queued work has
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    # On the CPU, set_float32_matmul_precision does not reach the products (PyTorch 1.13):
    # medium's peer there is autocast to bfloat16 (oneDNN's bf16 GEMMs).
    cpu_bf16 = device.type == "cpu" and args.matmul_precision == "medium"

    def precision():
        return torch.autocast("cpu", dtype=torch.bfloat16) if cpu_bf16 else contextlib.nullcontext()

    def train(i: int) -> float:
        dense, labels, ids = batch(i)
        opt.zero_grad(set_to_none=True)
        with precision():
            loss = loss_fn(model(dense, ids), labels)
        loss.backward()
        opt.step()
        return loss.item()

    def predict(i: int) -> None:
        dense, _, ids = batch(i)
        with torch.no_grad(), precision():
            torch.sigmoid(model(dense, ids))

    per_window = max(1, args.steps // args.windows)

    def timed(fn) -> List[float]:
        rates, step = [], 0
        for _ in range(args.windows):
            t = time.perf_counter()
            for _ in range(per_window):
                fn(step)
                step += 1
            sync()
            rates.append(per_window * args.batch_size / (time.perf_counter() - t))
        return rates

    last_loss = 0.0
    for i in range(args.warmup):
        last_loss = train(i)
    train_rates = timed(train)
    model.eval()
    for i in range(args.warmup):
        predict(i)
    predict_rates = timed(predict)
    params = sum(p.numel() for p in model.parameters())
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"torch       {torch.__version__}, {torch.get_num_threads()} threads, "
          f"optimizer {args.optimizer}, device {where}, "
          f"matmul {torch.get_float32_matmul_precision()}{' (bf16 autocast)' if cpu_bf16 else ''}, "
          f"batches {'copied from pinned host memory each step' if host else 'on the device'}")
    print(f"model       {params} parameters, built in {build_s:.2f} s")
    for name, rates in (("train", train_rates), ("predict", predict_rates)):
        print(f"{name:<11} samples/s  median {statistics.median(rates):.0f}  "
              f"min {min(rates):.0f}  max {max(rates):.0f}")
    print(f"last_loss   {last_loss:.5f}")
    print(f"RESULT train={statistics.median(train_rates):.1f} "
          f"predict={statistics.median(predict_rates):.1f}")


# ---- loss curves: engine and PyTorch from the same weights on the same data -------
def engine_config_text(path: str, optimizer: str, threads: int, lr: float = 0.0) -> str:
    text = open(path, encoding="utf-8").read()
    if lr > 0:
        text = re.sub(r"learning_rate:\s*[0-9.eE+-]+", f"learning_rate: {lr!r}", text)
    if optimizer == "adagrad":
        text = re.sub(r"(dense_optimizer\s*\{[^}]*?)sgd\s*\{\s*\}", r"\1adagrad {}", text)
        text = re.sub(r"(sparse_optimizer\s*\{[^}]*?)sgd\s*\{\s*\}", r"\1adagrad {}", text)
    text = re.sub(r"num_threads:\s*\d+", "", text)
    return text + f"\nnum_threads: {threads}\n"


def curve(args, spec: ModelSpec) -> None:
    import dlrm  # the engine's Python binding

    engine = dlrm.Engine(engine_config_text(args.config, args.optimizer, args.threads, args.lr))
    model = Dlrm(spec)
    state = engine.state_dict()
    with torch.no_grad():  # start PyTorch from the engine's initial weights
        for t, emb in enumerate(model.embeddings):
            emb.weight.copy_(torch.from_numpy(state[f"embedding.{spec.tables[t].name}.weight"]))
        for prefix, seq in (("bottom_mlp", model.bottom), ("top_mlp", model.top)):
            linears = [m for m in seq if isinstance(m, nn.Linear)]
            for i, lin in enumerate(linears):
                lin.weight.copy_(torch.from_numpy(state[f"{prefix}.{i}.weight"]))
                lin.bias.copy_(torch.from_numpy(state[f"{prefix}.{i}.bias"]))
    opt = make_optimizer(model, args.optimizer, spec)
    loss_fn = nn.BCEWithLogitsLoss()
    rng = np.random.default_rng(args.seed)
    # Per-step losses are noisy (each batch is new data); the means over windows of
    # --curve_every steps show the shape of the two curves.
    print(f"{'steps':>9} {'engine':>10} {'pytorch':>10} {'diff':>10}   (mean loss per window)")
    window = [0.0, 0.0]
    count = 0
    for step in range(args.curve):
        dense, labels, ids = make_batch(spec, rng, args.batch_size, args.bag_size, args.zipf,
                                        learnable=True)
        nf = len(ids)
        batch = dlrm.Batch(dense=dense, labels=labels,
                           lengths=np.full((nf, args.batch_size), args.bag_size, np.int32),
                           ids=np.concatenate([i.reshape(-1) for i in ids]))
        e_loss = engine.train_step(batch)
        d, l, t = to_torch((dense, labels, ids))
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(d, t), l)
        loss.backward()
        opt.step()
        window[0] += e_loss
        window[1] += loss.item()
        count += 1
        if count == args.curve_every or step == args.curve - 1:
            e, p_ = window[0] / count, window[1] / count
            print(f"{step + 1 - count:4d}-{step:<4d} {e:10.5f} {p_:10.5f} {e - p_:+10.2e}")
            window, count = [0.0, 0.0], 0
    engine.close()


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="bench/configs/*.pbtxt")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu",
                   help="cpu or cuda[:N]: where PyTorch trains (the peer of dlrm bench --device)")
    p.add_argument("--batch_size", type=int, default=2048)
    p.add_argument("--bag_size", type=int, default=1,
                   help="ids per bag; -1: each feature's pooling_factor")
    p.add_argument("--max_rows", type=int, default=0, help="caps every table's rows (0: none)")
    p.add_argument("--zipf", type=float, default=1.2, help="0: uniform ids")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adagrad"])
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--windows", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--pool_batches", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--curve", type=int, default=0, help="steps of the loss-curve comparison")
    p.add_argument("--curve_every", type=int, default=10)
    p.add_argument("--matmul_precision", default="highest", choices=["highest", "high", "medium"],
                   help="torch.set_float32_matmul_precision: fp32, TF32 or bf16 products "
                        "(the peer of dlrm bench --matmul_precision)")
    p.add_argument("--host_batches", action="store_true",
                   help="with --device cuda: each step copies its batch from pinned host "
                        "memory (as the engine does) instead of reading a device-resident one")
    p.add_argument("--lr", type=float, default=0.0,
                   help="learning rate for dense and sparse parameters, on both sides "
                        "(default: the config's)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.set_float32_matmul_precision(args.matmul_precision)
    spec = parse_config(args.config)
    if args.max_rows > 0:
        for t in spec.tables:
            t.rows = min(t.rows, args.max_rows)
    if args.lr > 0:
        spec.dense_lr = spec.sparse_lr = args.lr
    if args.curve:
        curve(args, spec)
    else:
        throughput(args, spec)


if __name__ == "__main__":
    main()
