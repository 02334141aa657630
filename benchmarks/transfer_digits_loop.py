"""Transfer on the embedded digits in a plain PyTorch loop (seconds, not minutes): the same CNN and the same
`litforge.models.transfer` code as `experiment=transfer_digits`, without Lightning's per-epoch overhead.

Pretrain on digits 0-4, then on 5-9 from k examples per class compare: training from scratch, fine-tuning
everything from the pretrained net, and a linear probe (frozen pretrained backbone). Mean test accuracy of 3 seeds.

    OMP_NUM_THREADS=1 python benchmarks/transfer_digits_loop.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from litforge.data.digits import DigitsDataModule  # noqa: E402
from litforge.models import transfer  # noqa: E402
from litforge.models.cnn import CNN  # noqa: E402


def data(classes: list[int], k: int | None, seed: int):
    dm = DigitsDataModule(classes=classes, train_per_class=k, val_fraction=0.0, split_seed=seed)
    dm.setup()
    (xtr, ytr), (xte, yte) = dm.split_arrays("train"), dm.split_arrays("test")
    return dm.normalize(xtr), ytr, dm.normalize(xte), yte


def fit(net: CNN, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float, probe: bool = False) -> None:
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    for _ in range(steps):
        net.train()
        if probe:
            transfer.backbone(net).eval()  # frozen BatchNorm statistics too
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def accuracy(net: CNN, x: torch.Tensor, y: torch.Tensor) -> float:
    net.eval()
    with torch.no_grad():
        return (net(x).argmax(1) == y).float().mean().item()


def main() -> None:
    torch.manual_seed(0)
    pre = CNN(1, (8, 8), 5)
    xtr, ytr, xte, yte = data([0, 1, 2, 3, 4], None, 0)
    fit(pre, xtr, ytr, steps=200, lr=3e-3)
    print(f"pretrained on 0-4 (full batch, 200 steps): test acc {accuracy(pre, xte, yte):.3f}")
    weights = pre.state_dict()
    print("| examples per class | scratch | fine-tune all | linear probe |\n|---|---|---|---|")
    for k in (1, 2, 5, 10):
        means = []
        for mode in ("scratch", "finetune", "probe"):
            accs = []
            for seed in range(3):
                torch.manual_seed(seed)
                net = CNN(1, (8, 8), 5)
                if mode != "scratch":
                    transfer.load_backbone(net, weights, "pretrained")
                if mode == "probe":
                    transfer.backbone(net).requires_grad_(False)
                xtr, ytr, xte, yte = data([5, 6, 7, 8, 9], k, seed)
                fit(net, xtr, ytr, steps=100, lr=1e-2 if mode == "probe" else 1e-3, probe=mode == "probe")
                accs.append(accuracy(net, xte, yte))
            means.append(sum(accs) / len(accs))
        print(f"| {k} | " + " | ".join(f"{m:.1%}" for m in means) + " |", flush=True)


if __name__ == "__main__":
    main()
