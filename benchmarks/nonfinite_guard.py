"""Cost of the NaN/inf-loss check (callbacks.nonfinite_loss) per training step, against a training step itself.

    python benchmarks/nonfinite_guard.py            # CPU; on a CUDA machine it also measures the GPU

The check keeps a reference to each step's loss and, every `check_every_n_steps`, runs one `torch.isfinite` over the
kept losses and one host sync. Printed: microseconds per step for the hooks alone, and the step time of a small MLP
(the default digits model) for scale.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import torch

from litforge.callbacks.fault_tolerance import StopOnNonFiniteLoss


def hooks_us_per_step(device: str, every: int, steps: int = 3000) -> float:
    guard = StopOnNonFiniteLoss(check_every_n_steps=every)
    # not a logging step: only `check_every_n_steps` makes the guard read (litforge.runtime.host_reads reads on logging
    # steps)
    trainer = SimpleNamespace(
        current_epoch=0,
        global_step=0,
        checkpoint_callback=None,
        _logger_connector=SimpleNamespace(should_update_logs=False),
    )
    loss = torch.tensor(1.0, device=device)
    start = time.perf_counter()
    for step in range(steps):
        guard.on_train_batch_start(trainer, None, None, step)
        guard.on_train_batch_end(trainer, None, {"loss": loss}, None, step)
    guard.check(trainer)
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e6


def step_us(device: str, steps: int = 300) -> float:
    net = torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(64, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    ).to(device)
    opt = torch.optim.AdamW(net.parameters())
    x, y = torch.randn(64, 1, 8, 8, device=device), torch.randint(0, 10, (64,), device=device)
    for i in range(steps + 20):
        if i == 20:
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e6


if __name__ == "__main__":
    torch.set_num_threads(1)  # a tiny model: thread hand-offs would dominate (and vary with machine load)
    for device in ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]:
        base = step_us(device)
        print(f"{device}: MLP training step {base:.0f} us")
        for every in (1, 50):
            cost = min(hooks_us_per_step(device, every) for _ in range(3))
            print(
                f"{device}: check_every_n_steps={every}: {cost:.1f} us per step ({100 * cost / base:.1f} % of a step)"
            )
