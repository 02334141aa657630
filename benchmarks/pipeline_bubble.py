"""The pipeline bubble of each `strategy.schedule`, measured on gloo ranks and computed from the schedule's actions.

    python benchmarks/pipeline_bubble.py --ranks 2 --microbatches 4 8 --repeats 5

Per schedule (gpipe, 1f1b: one stage per rank; interleaved_1f1b, zero_bubble: `strategy.stages_per_rank=2`) and
micro-batch count, on an MLP of 8 equal Linear layers (width `--width`) cut into ranks x stages-per-rank stages and
driven by litforge's own PipelineLoop (litforge.loops.pipeline, the code `strategy=pipeline` runs):

- measured: each rank's *busy* time is its stages' forward and backward over every micro-batch run back to back in
  that process with no pipeline around them (the same work, nothing to wait for); the step is the wall time of one
  pipeline training step (the schedule, its sends and receives, the gradient scaling). Idle fraction =
  1 - busy / step, per rank; it counts the bubble and the communication both. The two are timed alternately and the
  fastest of `--repeats` of each is kept (load from other processes only adds time).
- from the actions: the schedule's own per-rank action lists (`pipeline_order`) played out with forward = 1,
  full backward = 2, input-gradient = weight-gradient = 1 time unit and no communication cost: 1 - busy / makespan.
  GPipe's and 1F1B's match the textbook (P - 1) / (M + P - 1).

One thread per rank (`torch.set_num_threads(1)`): on the 2-core machine of the figures in docs/performance.md each
rank has its own core.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

SCHEDULES = (("gpipe", 1), ("1f1b", 1), ("interleaved_1f1b", 2), ("zero_bubble", 2))
COST = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}


Action = tuple[str, int, int]  # (F | B | I | W, stage, micro-batch)


def actions_of(order: dict[int, list[Any]]) -> dict[int, list[Action]]:
    """A torch schedule's `pipeline_order` as (kind, stage, micro-batch) compute actions per rank."""
    return {
        rank: [
            (a.computation_type.value, a.stage_index, a.microbatch_index)
            for a in actions
            if a is not None and a.computation_type.value in COST
        ]
        for rank, actions in order.items()
    }


def one_f_one_b(ranks: int, n: int) -> dict[int, list[Action]]:
    """The 1F1B order (rank r: P - 1 - r warm-up forwards, then one forward and one backward, then the remaining
    backwards), written out because torch 2.14's `Schedule1F1B.pipeline_order` lists it shifted by one micro-batch
    on the later ranks (a description only: its `step` runs the right order)."""
    order = {}
    for r in range(ranks):
        warm = min(ranks - 1 - r, n)
        acts: list[Action] = [("F", r, m) for m in range(warm)]
        for i in range(n - warm):
            acts += [("F", r, warm + i), ("B", r, i)]
        acts += [("B", r, m) for m in range(n - warm, n)]
        order[r] = acts
    return order


def simulated_idle(order: dict[int, list[Action]], places: list[int]) -> list[float]:
    """Each rank's idle fraction when its actions (F, B, I, W of (stage, micro-batch)) run in the listed order, each
    as soon as its rank is free and its input is ready (COST units, no communication time)."""
    last = len(places) - 1
    todo = {rank: list(actions) for rank, actions in order.items()}
    done: dict[tuple[str, int, int], float] = {}
    free = dict.fromkeys(todo, 0.0)
    busy = dict.fromkeys(todo, 0.0)

    def ready(kind: str, stage: int, micro: int) -> float | None:
        if kind == "F":
            return 0.0 if stage == 0 else done.get(("F", stage - 1, micro))
        if kind in ("B", "I"):
            return done.get(("F", stage, micro)) if stage == last else done.get(("G", stage + 1, micro))
        return done.get(("I", stage, micro))  # W after its own input-gradient

    while any(todo.values()):
        progressed = False
        for rank, actions in todo.items():
            while actions:
                kind, stage, micro = actions[0]
                at = ready(kind, stage, micro)
                if at is None:
                    break
                end = max(free[rank], at) + COST[kind]
                free[rank], busy[rank] = end, busy[rank] + COST[kind]
                done[(kind, stage, micro)] = end
                if kind in ("B", "I"):
                    done[("G", stage, micro)] = end
                actions.pop(0)
                progressed = True
        if not progressed:
            raise RuntimeError("the schedule's actions wait on each other")
    makespan = max(free.values())
    return [1 - busy[rank] / makespan for rank in sorted(busy)]


def worker(rank: int, world: int, args: argparse.Namespace, results: Any) -> None:
    import torch
    import torch.distributed as dist

    from litforge.loops.pipeline import PipelineLoop
    from litforge.parallel.pipeline import rank_stages
    from litforge.parallel.pipeline_split import split_net, stage_places
    from litforge.tasks.classification import ClassificationTask

    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=world)
    side = int(args.width**0.5)
    for schedule, per_rank in SCHEDULES:
        for n in args.microbatches:
            torch.manual_seed(0)
            net = {"_target_": "litforge.models.mlp.MLP", "_partial_": True, "hidden_dims": [args.width] * 7}
            sgd = {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 1e-3}
            task = ClassificationTask(
                net={**net, "dropout": 0.0}, optimizer=sgd, input_shape=[1, side, side], num_classes=args.width
            )
            total = world * per_rank
            stages = split_net(task.net, total)
            places = stage_places(schedule, world, per_rank)
            mine, tied = rank_stages(stages, places, rank)
            loop = PipelineLoop(
                task,
                [stages[i] for i in mine],
                mine,
                total,
                schedule,
                n,
                group=None,
                stage_ranks=places,
                tied=tied,
                tied_group=None,
                device=torch.device("cpu"),
            )
            batch = (torch.randn(args.batch, 1, side, side), torch.randint(0, args.width, (args.batch,)))
            # busy: this rank's stages alone, forward and backward of every micro-batch, on the inputs they get
            with torch.no_grad():
                inputs, h = [], batch[0]
                for stage in stages:
                    inputs.append(h)
                    h = stage(h)
            task.zero_grad(set_to_none=True)
            loop.run(batch, train=True)  # the first step infers shapes
            busy, steps = [], []
            for _ in range(args.repeats):  # alternated, and the fastest of each kept: other load only adds time
                start = time.perf_counter()
                for i in mine:
                    for part in inputs[i].chunk(n):
                        x = part.clone().requires_grad_(i > 0)
                        out = stages[i](x)
                        out.backward(torch.ones_like(out))
                busy.append(time.perf_counter() - start)
                task.zero_grad(set_to_none=True)
                dist.barrier()
                start = time.perf_counter()
                loop.run(batch, train=True)
                dist.barrier()
                steps.append(time.perf_counter() - start)
                task.zero_grad(set_to_none=True)
            order = next(iter(loop._schedules.values())).pipeline_order
            simulated = simulated_idle(one_f_one_b(world, n) if schedule == "1f1b" else actions_of(order), places)
            step, work = min(steps), min(busy)
            results.put((schedule, per_rank, n, rank, step, work, 1 - work / step, simulated[rank]))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--microbatches", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=1024, help="a square: the input is 1 x sqrt x sqrt")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--port", type=int, default=29517)
    args = parser.parse_args()
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    workers = [context.Process(target=worker, args=(r, args.ranks, args, results)) for r in range(args.ranks)]
    for w in workers:
        w.start()
    rows = [results.get() for _ in range(len(SCHEDULES) * len(args.microbatches) * args.ranks)]
    for w in workers:
        w.join()
    print(f"{args.ranks} gloo ranks x 1 thread, MLP of 8 Linear {args.width}x{args.width}, batch {args.batch}")
    print(
        "| schedule | stages/rank | micro-batches | step ms | busy ms per rank | idle, measured | idle, from actions |"
    )
    print("|---|---|---|---|---|---|---|")
    for schedule, per_rank in SCHEDULES:
        for n in args.microbatches:
            mine = sorted((r for r in rows if r[0] == schedule and r[2] == n), key=lambda r: r[3])
            step = max(r[4] for r in mine) * 1e3
            busy = " / ".join(f"{r[5] * 1e3:.0f}" for r in mine)
            measured = " / ".join(f"{r[6]:.0%}" for r in mine)
            simulated = " / ".join(f"{r[7]:.0%}" for r in mine)
            print(f"| {schedule} | {per_rank} | {n} | {step:.0f} | {busy} | {measured} | {simulated} |")


if __name__ == "__main__":
    main()
