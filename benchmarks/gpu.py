"""One GPU, one table: a plain PyTorch loop vs litforge's default vs litforge tuned, for ResNet-18 and the GPT.

    PYTHONPATH=src python3 benchmarks/gpu.py                 # on a CUDA machine, < 8 min on one GPU
    PYTHONPATH=src python3 benchmarks/gpu.py --device cpu --tiny   # dry run: every arm a few steps on CPU (the test)

Workloads: ResNet-18 (`model=resnet`) on CIFAR-shaped random images held on the device (3×32×32, 10 classes), and
a GPT (`experiment=gpt_char` at nanoGPT's char-level size: dim 384, 6 blocks, 6 heads, 256 tokens) on
`data=python_docs`, packed documents on. Arms, each timed over the same window of steady-state optimizer steps after a
warm-up (the first compile, cudnn autotuning and allocations are outside it):

- **plain loop**: a hand-written PyTorch loop on the same net, batch and AdamW, data already on the device, fp32
  (for the GPT: `gpt_speed.NanoGPT`, fused causal SDPA, as benchmarks/gpt_speed.py's reference arm);
- **litforge default**: `python train.py trainer=gpu ...` (its precision is conf/trainer/gpu.yaml's);
- **litforge tuned**: + `trainer.precision=bf16-mixed compile=true steps_per_call=8`, + `channels_last=true
  data.on_device=true` for the ResNet (the text data has no `on_device`);
- with ≥ 2 GPUs also **ddp** and **fsdp** (the tuned arm without `steps_per_call`, which runs on one device only,
  on every GPU, through the CLI: Lightning starts the ranks).

Columns: samples/s, the ratio to the plain loop, MFU (model FLOPs per sample from `FlopCounterMode` on the plain
loop's net, forward + backward, × samples/s ÷ the GPU's dense bf16 peak from :data:`PEAK_BF16`, or a measured
bf16 matmul peak for a GPU not listed), and host syncs per optimizer step (`torch.cuda.set_sync_debug_mode("warn")`
over the window, each warning counted). Validation, test and checkpoints are off in every arm, so the window is
training steps only. Without CUDA (and without `--device cpu`) it says so in one line and exits 0. After the
table, on CUDA, one line compares the GPT's FlexAttention document mask with the explicit mask (logits, gradients).

On the lent GPU machine (its python3 has torch, Lightning, torchmetrics, torchvision, tensorboard and onnxruntime,
but no hydra-core, omegaconf or antlr4, and no package registry) bring the pure-Python wheels:
`pip download --no-deps -d wheels hydra-core omegaconf antlr4-python3-runtime` here, then there
`pip install --no-deps wheels/*.whl && PYTHONPATH=src python3 benchmarks/gpu.py`. Not yet run on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: dense bf16 tensor-core peak, FLOP/s, by a substring of torch.cuda.get_device_name() (vendor data sheets)
PEAK_BF16 = {
    "H200": 989e12,
    "H100": 989e12,
    "GH200": 989e12,
    "B200": 2250e12,
    "A100": 312e12,
    "A10G": 70e12,
    "L40S": 362e12,
    "L4": 121e12,
    "RTX 4090": 165e12,
    "A6000": 155e12,
}

SIZES = {  # (full GPU run, --tiny dry run)
    "resnet": (
        {"batch": 256, "train_size": 50_000, "image": 32, "warmup": 15, "steps": 80},
        {"batch": 2, "train_size": 64, "image": 8, "warmup": 1, "steps": 2},
    ),
    "gpt": (
        {"batch": 64, "block": 256, "dim": 384, "depth": 6, "heads": 6, "warmup": 15, "steps": 80},
        {"batch": 4, "block": 32, "dim": 32, "depth": 1, "heads": 2, "warmup": 1, "steps": 2, "max_chars": 20_000},
    ),
}


class SyncWindow:
    """Counts host syncs (CUDA sync debug mode warnings) and wall time over a window of optimizer steps."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        self.t0 = self.steps0 = 0.0
        self.result: dict[str, float] | None = None
        self._catch: Any = None

    def open(self, steps_done: int) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
        self._catch = warnings.catch_warnings(record=True)
        self.records = self._catch.__enter__()
        warnings.simplefilter("always")
        if self.cuda:
            torch.cuda.set_sync_debug_mode("warn")
        self.t0, self.steps0 = time.perf_counter(), steps_done

    def close(self, steps_done: int) -> None:
        import torch

        if self.cuda:
            torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize()
        seconds = time.perf_counter() - self.t0
        self._catch.__exit__(None, None, None)
        syncs = sum("synchroniz" in str(r.message) for r in self.records)
        self.result = {
            "seconds": seconds,
            "steps": steps_done - self.steps0,
            "syncs": float(syncs) if self.cuda else float("nan"),
        }


def _window_callback() -> Any:
    import pytorch_lightning as pl

    class Window(pl.Callback):
        """Opens the SyncWindow at `warmup` optimizer steps and closes it at `warmup + steps`; writes `out`."""

        def __init__(self, warmup: int, steps: int, device: str, out: str | None = None) -> None:
            self.warmup, self.steps, self.out = warmup, steps, out
            self.window = SyncWindow(device)
            self.opened = False

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if not self.opened and trainer.global_step >= self.warmup:
                self.window.open(trainer.global_step)
                self.opened = True

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, idx: int) -> None:
            if self.opened and self.window.result is None and trainer.global_step >= self.warmup + self.steps:
                self.window.close(trainer.global_step)
                trainer.should_stop = True
                if self.out and trainer.is_global_zero:
                    Path(self.out).write_text(json.dumps(self.window.result))

    return Window


# ---- the configs ----------------------------------------------------------------------------------------------------
def overrides(workload: str, arm: str, device: str, tiny: bool, out_dir: str) -> list[str]:
    """The `python train.py` overrides of a litforge arm."""
    s = SIZES[workload][tiny]
    common = [
        "print_config=false",
        "test_after_training=false",
        "callbacks.progress_bar=null",
        "callbacks.model_checkpoint=null",
        "callbacks.early_stopping=null",
        "trainer.limit_val_batches=0",
        "trainer.num_sanity_val_steps=0",
        f"trainer.max_steps={s['warmup'] + s['steps'] + 8}",
        "trainer.max_epochs=1000",
        "callbacks.tensorboard_extras.model_graph=false",
        "callbacks.model_summary=null",
        f"paths.output_dir={out_dir}",
        f"paths.data_dir={out_dir}/data",
        f"data.batch_size={s['batch']}",
    ]
    common += ["trainer=gpu"] if device == "cuda" else ["trainer=cpu", "trainer.precision=32-true"]
    if workload == "resnet":
        common += [
            "model=resnet",
            "model.depth=18",
            "data._target_=common.SyntheticImages",
            f"+data.input_shape=[3,{s['image']},{s['image']}]",
            "+data.num_classes=10",
            f"+data.train_size={s['train_size']}",
            "+data.test_size=64",
            "~data.data_dir",
            "~data.download",
        ]
    else:
        common += [
            "experiment=gpt_char",
            "callbacks.text_samples=null",
            f"data.block_size={s['block']}",
            f"model.dim={s['dim']}",
            f"model.depth={s['depth']}",
            f"model.heads={s['heads']}",
        ]
        if "max_chars" in s:
            common.append(f"data.max_chars={s['max_chars']}")
    if arm == "litforge default":
        return common
    tuned = ["trainer.precision=bf16-mixed", "steps_per_call=8"]
    tuned.append("compile=true" if not tiny else "compile=false")  # a cold compile costs ~1 min on a 2-core CPU
    if workload == "resnet":
        tuned += ["channels_last=true", "data.on_device=true"]
    if arm in ("ddp", "fsdp"):  # steps_per_call runs on one device only (refused with a strategy)
        import torch

        tuned = [t for t in tuned if not t.startswith("steps_per_call")]
        tuned += [f"strategy={arm}", f"trainer.devices={torch.cuda.device_count()}"]
    return common + tuned


def compose_arm(workload: str, arm: str, device: str, tiny: bool, out_dir: str) -> Any:
    from common import compose

    cfg = compose(
        "data=cifar10" if workload == "resnet" else "data=python_docs",
        *overrides(workload, arm, device, tiny, out_dir),
        output_dir=out_dir,
    )
    return cfg


# ---- the arms -------------------------------------------------------------------------------------------------------
def litforge_arm(workload: str, arm: str, device: str, tiny: bool) -> dict[str, float]:
    """`litforge.jobs.train.train(cfg)` in this process with the Window callback added (it writes the window's JSON)."""
    from omegaconf import open_dict

    from litforge.jobs.train import train

    s = SIZES[workload][tiny]
    with tempfile.TemporaryDirectory(prefix="litforge-gpu-") as tmp:
        out = Path(tmp) / "window.json"
        cfg = compose_arm(workload, arm, device, tiny, tmp)
        with open_dict(cfg):
            cfg.callbacks["zz_window"] = {
                "_target_": "gpu._window_callback_instance",
                "warmup": s["warmup"],
                "steps": s["steps"],
                "device": device,
                "out": str(out),
            }
        train(cfg)
        if not out.is_file():
            raise RuntimeError("the training stopped before the measuring window closed")
        r = json.loads(out.read_text())
    return {"samples_per_s": r["steps"] * s["batch"] / r["seconds"], "syncs_per_step": r["syncs"] / max(r["steps"], 1)}


def _window_callback_instance(**kwargs: Any) -> Any:
    """Hydra target for the Window callback (its class is built on demand: pytorch_lightning imports late)."""
    return _window_callback()(**kwargs)


def cli_arm(workload: str, arm: str, device: str, tiny: bool) -> dict[str, float]:
    """ddp / fsdp through `python train.py` (Lightning starts one process per GPU); rank 0 writes the window."""
    s = SIZES[workload][tiny]
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="litforge-gpu-") as tmp:
        out = Path(tmp) / "window.json"
        data = ["data=cifar10"] if workload == "resnet" else ["data=python_docs"]
        args = [
            *data,
            *overrides(workload, arm, device, tiny, tmp),
            "+callbacks.zz_window._target_=gpu._window_callback_instance",
            f"+callbacks.zz_window.warmup={s['warmup']}",
            f"+callbacks.zz_window.steps={s['steps']}",
            f"+callbacks.zz_window.device={device}",
            f"+callbacks.zz_window.out={out}",
        ]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(root / "src"), str(root / "benchmarks"), os.environ.get("PYTHONPATH", "")]
            ),
        }
        subprocess.run(
            [sys.executable, str(root / "train.py"), *args],
            cwd=root,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=300,
        )
        r = json.loads(out.read_text())
    return {
        "samples_per_s": r["steps"] * s["batch"] * _devices() / r["seconds"],
        "syncs_per_step": r["syncs"] / max(r["steps"], 1),
    }


def _devices() -> int:
    import torch

    return torch.cuda.device_count()


def plain_arm(workload: str, device: str, tiny: bool) -> dict[str, float]:
    """The hand-written loop: the net on the device, the data on the device, AdamW, fp32, no reads of the loss."""
    import torch
    import torch.nn.functional as F

    s = SIZES[workload][tiny]
    torch.manual_seed(0)
    net, batches = build_plain(workload, device, tiny)
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
    window = SyncWindow(device)
    for step in range(s["warmup"] + s["steps"]):
        if step == s["warmup"]:
            window.open(step)
        x, y = batches(step)
        logits = net(x)
        loss = F.cross_entropy(logits.flatten(0, -2) if logits.dim() > 2 else logits, y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    window.close(s["warmup"] + s["steps"])
    r = window.result
    assert r is not None
    return {"samples_per_s": r["steps"] * s["batch"] / r["seconds"], "syncs_per_step": r["syncs"] / r["steps"]}


def build_plain(workload: str, device: str, tiny: bool) -> tuple[Any, Any]:
    """The plain arm's net and a `batches(step)` that slices batches from tensors already on the device."""
    import torch

    s = SIZES[workload][tiny]
    if workload == "resnet":
        from litforge.models.resnet import ResNet

        net = ResNet(num_classes=10, in_channels=3, image_size=(s["image"], s["image"]), depth=18).to(device)
        n = s["train_size"]
        x = torch.randn(n, 3, s["image"], s["image"], device=device)
        y = torch.randint(0, 10, (n,), device=device)
    else:
        from gpt_speed import NanoGPT
        from litforge.data.text import TextDataModule

        dm = TextDataModule(block_size=s["block"], batch_size=s["batch"], max_chars=s.get("max_chars"))
        tokens, _ = dm._splits["train"]
        count = (len(tokens) - 1) // s["block"]
        x = tokens[: count * s["block"]].view(count, s["block"]).to(device)
        y = tokens[1 : count * s["block"] + 1].view(count, s["block"]).to(device)
        net = NanoGPT(dm.vocab_size, s["block"], s["dim"], s["depth"], s["heads"], 4.0).to(device)
        n = count
    order = torch.randperm(n, device=device)

    def batches(step: int) -> tuple[Any, Any]:
        start = (step * s["batch"]) % max(n - s["batch"], 1)
        idx = order[start : start + s["batch"]]
        return x[idx], y[idx]

    return net, batches


def flops_per_sample(workload: str, device: str, tiny: bool) -> float:
    """Forward + backward FLOPs of the plain arm's net on one batch (FlopCounterMode), per sample."""
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    s = SIZES[workload][tiny]
    net, batches = build_plain(workload, device, tiny)
    x, y = batches(0)
    with FlopCounterMode(display=False) as counter:
        logits = net(x)
        F.cross_entropy(logits.flatten(0, -2) if logits.dim() > 2 else logits, y.flatten()).backward()
    return counter.get_total_flops() / s["batch"]


def bf16_peak(device: str) -> tuple[float, str]:
    """The GPU's dense bf16 peak from PEAK_BF16, else the best measured bf16 matmul (FLOP/s, and where from)."""
    import torch

    if device == "cuda":
        name = torch.cuda.get_device_name(0)
        for key, peak in PEAK_BF16.items():
            if key in name:
                return peak, f"{name} data sheet"
    n = 8192 if device == "cuda" else 512
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    best = float("inf")
    for _ in range(5):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        a @ a
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best, f"measured {n}² bf16 matmul"


def flex_check(device: str) -> str:
    """On CUDA: the GPT's FlexAttention document mask against the explicit mask, logits and gradients."""
    import torch

    from litforge.models.gpt import GPT

    if device != "cuda":
        return "flex vs mask: CUDA only (FlexAttention has no CPU backward)"
    torch.manual_seed(0)
    nets = {
        a: GPT(vocab_size=50, block_size=128, dim=64, depth=2, heads=4, attention=a).to(device)
        for a in ("mask", "flex")
    }
    nets["flex"].load_state_dict(nets["mask"].state_dict())
    idx = torch.randint(50, (4, 128), device=device)
    doc_ids = torch.cat([torch.zeros(4, 40, dtype=torch.long), torch.ones(4, 88, dtype=torch.long)], 1).to(device)
    outs = {}
    for a, net in nets.items():
        out = net(idx, doc_ids)
        out.square().mean().backward()
        outs[a] = out
    logits = (outs["flex"] - outs["mask"]).abs().max().item()
    grads = max(
        (p.grad - q.grad).abs().max().item()
        for p, q in zip(nets["flex"].parameters(), nets["mask"].parameters(), strict=True)
    )
    return f"flex vs mask: max |Δ logits| {logits:.1e}, max |Δ grad| {grads:.1e}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes and a few steps (a dry run of every arm)")
    parser.add_argument("--workloads", nargs="+", default=["resnet", "gpt"], choices=["resnet", "gpt"])
    args = parser.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "gpu.py: no CUDA GPU on this machine (torch.cuda.is_available() is False): nothing to run "
            "(--device cpu --tiny runs every arm a few steps on CPU)"
        )
        return 0
    from common import print_table, quiet

    quiet()
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    peak, peak_from = bf16_peak(args.device)
    arms = ["plain loop", "litforge default", "litforge tuned"] + (["ddp", "fsdp"] if gpus >= 2 else [])
    rows = []
    for workload in args.workloads:
        flops = flops_per_sample(workload, args.device, args.tiny)
        base = None
        for arm in arms:
            start = time.perf_counter()
            try:
                if arm == "plain loop":
                    r = plain_arm(workload, args.device, args.tiny)
                elif arm in ("ddp", "fsdp"):
                    r = cli_arm(workload, arm, args.device, args.tiny)
                else:
                    r = litforge_arm(workload, arm, args.device, args.tiny)
            except Exception as exc:  # one failed arm is a row, not a lost table
                rows.append([workload, arm, "failed", "", "", "", f"{type(exc).__name__}: {str(exc)[:80]}"])
                continue
            base = base or r["samples_per_s"]
            rows.append(
                [
                    workload,
                    arm,
                    f"{r['samples_per_s']:,.0f}",
                    f"{r['samples_per_s'] / base:.2f}",
                    f"{flops * r['samples_per_s'] / peak:.1%}",
                    "n/a (CPU)" if r["syncs_per_step"] != r["syncs_per_step"] else f"{r['syncs_per_step']:.2f}",
                    f"{time.perf_counter() - start:.0f} s",
                ]
            )
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU"
    print_table(
        f"{name}, torch {torch.__version__}: samples/s over steady-state steps; MFU vs bf16 peak "
        f"{peak / 1e12:.1f} TFLOP/s ({peak_from}){' (--tiny dry run)' if args.tiny else ''}",
        ["workload", "arm", "samples/s", "× plain loop", "MFU", "syncs/step", "arm wall"],
        rows,
    )
    print(flex_check(args.device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
