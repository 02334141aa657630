"""`experiment=gpt_char` through litforge vs a hand-written nanoGPT-style loop: wall time at equal validation loss.

    OMP_NUM_THREADS=1 python benchmarks/gpt_speed.py --repeats 3
    OMP_NUM_THREADS=1 python benchmarks/gpt_speed.py --repeats 1 -- trainer.max_epochs=2   # shorter (both arms)
    OMP_NUM_THREADS=1 python benchmarks/gpt_speed.py --step-only   # the step's compute alone, both nets (~1 min)

The reference arm (:func:`hand_loop`) is what a careful user writes after karpathy/nanoGPT: its own GPT of the
same size (dim, depth, heads, MLP ratio, tied embeddings, learned positions, std-0.02 init), fused q/k/v, SDPA's
`is_causal` kernel, the same packed windows of the same text in a seeded random order, batch, AdamW (lr, betas,
weight decay on every parameter, as litforge's task does), the per-epoch cosine, gradient clipping and step count as
`experiment=gpt_char`, and, like nanoGPT's `estimate_loss`, the validation loss measured while it trains, once per
epoch as litforge does (`--hand-without-validation` adds an arm that trains only). Like nanoGPT it lets context run
across document boundaries (it has no document mask); litforge keeps `data.packed=true`, so its attention stays inside
documents. litforge also does what the hand loop does not: a 200-token text sample per validation, the sanity-check
validation, checkpoints, TensorBoard logging, provenance; all of it is on litforge's clock.

Both arms are timed from building the data to the end of training, arms interleaved (load drifts hit both), and
the final validation loss of each is computed off the clock by the same function on the same val windows (each
with its own attention rule). The table gives the median wall time and the process CPU time (on a shared machine
with one torch thread the CPU time moves far less with load than the wall time), their ratios litforge / hand loop
(medians of per-repeat ratios), and the val loss.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from common import ROOT, compose, interleave, median, print_table, quiet  # noqa: E402

del ROOT


# ---- the reference arm: a nanoGPT-style model and loop ---------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)  # one matmul for q, k and v (nanoGPT's c_attn)
        self.proj = nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, int(dim * mlp_ratio)), nn.Linear(int(dim * mlp_ratio), dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # the fused causal kernel
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class NanoGPT(nn.Module):
    def __init__(self, vocab_size: int, block_size: int, dim: int, depth: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab_size, dim), nn.Embedding(block_size, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, mlp_ratio) for _ in range(depth))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.tok.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def _windows(tokens: torch.Tensor, doc_ids: torch.Tensor, block: int) -> tuple[torch.Tensor, ...]:
    """All non-overlapping windows at once (input, target, doc ids), as litforge's `Windows` cuts them."""
    n = (len(tokens) - 1) // block
    x = tokens[: n * block].view(n, block)
    y = tokens[1 : n * block + 1].view(n, block)
    return x, y, doc_ids[: n * block].view(n, block)


@torch.no_grad()
def val_loss(net: nn.Module, windows: tuple[torch.Tensor, ...], batch: int, packed: bool) -> float:
    """Mean next-token cross-entropy over all val windows (the same number for both arms' nets)."""
    was = net.training
    net.eval()
    x, y, d = windows
    total = 0.0
    for s in range(0, len(x), batch):
        logits = net(x[s : s + batch], d[s : s + batch] if packed else None)
        total += F.cross_entropy(logits.flatten(0, 1), y[s : s + batch].flatten(), reduction="sum").item()
    net.train(was)
    return total / y.numel()


def hand_loop(cfg: Any, validate_each_epoch: bool = True) -> dict[str, Any]:
    """nanoGPT-style training on `cfg`'s data, sizes, optimizer, schedule and step count; returns wall s + net.

    Like nanoGPT (its `estimate_loss` every `eval_interval` steps) it measures the validation loss while it trains,
    on the clock: once per epoch, where `experiment=gpt_char` validates; `validate_each_epoch=False` trains only.
    """
    from hydra.utils import instantiate

    start, cpu = time.perf_counter(), time.process_time()
    torch.manual_seed(cfg.seed)
    dm = instantiate(cfg.data, _convert_="all")
    x, y, _ = _windows(*dm._splits["train"], dm.block_size)
    m = cfg.model
    net = NanoGPT(dm.vocab_size, dm.block_size, m.dim, m.depth, m.heads, m.mlp_ratio)
    o = cfg.optimizer
    optimizer = torch.optim.AdamW(net.parameters(), lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay)
    epochs, batch = cfg.trainer.max_epochs, cfg.data.batch_size
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    clip = cfg.trainer.get("gradient_clip_val")
    g = torch.Generator().manual_seed(cfg.seed)
    val_windows = _windows(*dm._splits["val"], dm.block_size)
    steps, val_s = 0, 0.0
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=g)
        for s in range(0, len(x), batch):
            i = order[s : s + batch]
            loss = F.cross_entropy(net(x[i]).flatten(0, 1), y[i].flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
            optimizer.step()
            steps += 1
        scheduler.step()
        if validate_each_epoch:  # nanoGPT's estimate_loss, on the clock, where litforge validates: once per epoch
            val_start = time.perf_counter()
            val_loss(net, val_windows, dm.eval_batch_size, packed=False)
            val_s += time.perf_counter() - val_start
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "net": net, "dm": dm, "packed": False, "steps": steps, "val_s": val_s}


# ---- the litforge arm -------------------------------------------------------------------------------------------
class KeepNet(pl.Callback):
    """Keeps the trained task (its net is scored off the clock) and the optimizer steps taken."""

    last: Any = None

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        KeepNet.last = (pl_module, trainer.global_step, trainer.datamodule)


def litforge_run(overrides: list[str]) -> dict[str, Any]:
    """`python train.py experiment=gpt_char <overrides>` in-process (`litforge.jobs.train.train`), timed as a whole."""
    from omegaconf import open_dict

    from litforge.jobs.train import train

    cfg = compose("experiment=gpt_char", "print_config=false", "test_after_training=false", *overrides)
    with open_dict(cfg):
        cfg.callbacks["zz_keep_net"] = {"_target_": "gpt_speed.KeepNet"}
    start, cpu = time.perf_counter(), time.process_time()
    train(cfg)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    import gpt_speed  # the callback's class as Hydra imported it (this file may be running as __main__)

    task, steps, dm = gpt_speed.KeepNet.last
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "net": task.net.float().cpu(),
        "dm": dm,
        "packed": bool(dm.packed),
        "steps": steps,
    }


def score(run: dict[str, Any]) -> dict[str, Any]:
    dm = run.pop("dm")
    windows = _windows(*dm._splits["val"], dm.block_size)
    run["val_loss"] = val_loss(run.pop("net"), windows, dm.eval_batch_size, run["packed"])
    return run


def step_only(rounds: int = 16, steps: int = 4) -> list[list[Any]]:
    """Forward + backward + AdamW on one fixed batch of gpt_char's shape, nanoGPT's net vs litforge's (with packed
    documents, and without: `is_causal`), interleaved rounds: the per-step compute without loops, data or logging."""
    from hydra.utils import instantiate

    from litforge.models.gpt import GPT

    cfg = compose("experiment=gpt_char")
    dm = instantiate(cfg.data, _convert_="all")
    m, vocab, block, batch = cfg.model, dm.vocab_size, dm.block_size, cfg.data.batch_size
    torch.manual_seed(0)
    x, y = torch.randint(0, vocab, (batch, block)), torch.randint(0, vocab, (batch, block))
    doc_ids = torch.cumsum((torch.rand(batch, block) < 0.02).long(), 1)  # ~1 document start per 50 tokens
    nets = {
        "nanoGPT net": (NanoGPT(vocab, block, m.dim, m.depth, m.heads, m.mlp_ratio), None),
        "litforge GPT, packed documents": (GPT(vocab, block, m.dim, m.depth, m.heads, m.mlp_ratio), doc_ids),
        "litforge GPT, no documents (is_causal)": (GPT(vocab, block, m.dim, m.depth, m.heads, m.mlp_ratio), None),
    }
    optimizers = {name: torch.optim.AdamW(net.parameters(), lr=1e-3) for name, (net, _) in nets.items()}

    def run(name: str) -> float:
        net, docs = nets[name]
        start = time.perf_counter()
        for _ in range(steps):
            loss = F.cross_entropy(net(x, docs).flatten(0, 1), y.flatten())
            optimizers[name].zero_grad(set_to_none=True)
            loss.backward()
            optimizers[name].step()
        return (time.perf_counter() - start) / steps

    times = interleave({name: (lambda name=name: run(name)) for name in nets}, rounds)
    times = {name: values[2:] for name, values in times.items()}  # the first rounds warm up
    base = times["nanoGPT net"]
    rows = [
        [name, f"{median(values) * 1e3:.2f}", f"{median([v / b for v, b in zip(values, base, strict=True)]):.3f}"]
        for name, values in times.items()
    ]
    print_table(
        f"gpt_char's step, {rounds - 2} interleaved rounds of {steps} steps (torch threads {torch.get_num_threads()})",
        ["net", "ms per step (median)", "× nanoGPT net"],
        rows,
    )
    return rows


def main(argv: list[str] | None = None) -> list[list[Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--arms",
        nargs="+",
        default=["default"],
        help="litforge arms: default, and/or extra override sets as 'name:key=v,key=v'",
    )
    parser.add_argument(
        "--hand-without-validation",
        action="store_true",
        help="also time the hand loop without its per-epoch validation (training alone)",
    )
    parser.add_argument("overrides", nargs="*", help="overrides for both arms (after --), e.g. trainer.max_epochs=2")
    parser.add_argument(
        "--step-only",
        action="store_true",
        help="time only the step's compute (forward, backward, AdamW) of both nets, then exit",
    )
    args = parser.parse_args(argv)
    quiet()
    if args.step_only:
        return step_only()
    arms: dict[str, Any] = {
        "hand-written loop": lambda: score(hand_loop(compose("experiment=gpt_char", *args.overrides)))
    }
    if args.hand_without_validation:
        arms["hand-written loop, no validation while training"] = lambda: score(
            hand_loop(compose("experiment=gpt_char", *args.overrides), validate_each_epoch=False)
        )
    for arm in args.arms:
        name, _, extra = arm.partition(":")
        extra_overrides = [e for e in extra.split(",") if e]
        arms[f"litforge {name}"] = lambda e=extra_overrides: score(litforge_run([*args.overrides, *e]))
    results = interleave(arms, args.repeats)
    base = results["hand-written loop"]
    rows = []
    for name, runs in results.items():
        ratios = [r["wall_s"] / b["wall_s"] for r, b in zip(runs, base, strict=True)]
        cpu_ratios = [r["cpu_s"] / b["cpu_s"] for r, b in zip(runs, base, strict=True)]
        rows.append(
            [
                name,
                runs[0]["steps"],
                f"{median([r['wall_s'] for r in runs]):.1f}",
                f"{median(ratios):.2f}",
                f"{median([r['cpu_s'] for r in runs]):.1f}",
                f"{median(cpu_ratios):.2f}",
                f"{median([r['val_loss'] for r in runs]):.4f}",
                ", ".join(f"{r['wall_s']:.1f}" for r in runs),
            ]
        )
    print_table(
        f"experiment=gpt_char: litforge vs a hand-written loop ({args.repeats} interleaved repeats, "
        f"torch threads {torch.get_num_threads()})",
        [
            "arm",
            "optimizer steps",
            "wall s (median)",
            "× hand loop",
            "CPU s (median)",
            "CPU × hand loop",
            "final val loss",
            "wall s per repeat",
        ],
        rows,
    )
    return rows


if __name__ == "__main__":
    main()
