"""CPU inference latency of one net in every runtime litforge ships, against eager PyTorch fp32.

    python benchmarks/inference.py                                  # the digits MLP (random weights)
    python benchmarks/inference.py --model resnet --shape 3,32,32   # any conf/model/ option, any image shape
    python benchmarks/inference.py --ckpt logs/train/runs/<run>/checkpoints/last.ckpt   # a trained checkpoint

Variants: eager fp32, eager channels_last, eager bf16 autocast, (`--compile`: torch.compile), onnxruntime fp32,
onnxruntime dynamic int8, onnxruntime static QDQ int8, torchao dynamic int8. Timing is `litforge.deploy.latency` —
the same harness as `export.py`'s compression report: medians of interleaved rounds, thread counts explicit. Latency
only depends on the weights' shapes, so random weights measure speed faithfully (not accuracy: use export.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def build_net(args: argparse.Namespace):  # noqa: ANN201
    """(net, inputs for timing, calibration batches) from a checkpoint or a conf/model/ option."""
    import torch
    from omegaconf import OmegaConf

    if args.ckpt:
        from litforge.deploy.net import load_exportable
        from litforge.deploy.quantize import calibration_batches

        _, datamodule, net, _ = load_exportable(OmegaConf.create({"ckpt_path": args.ckpt, "data": None}))
        images, _ = datamodule.split_arrays("test")
        x = datamodule.normalize(images).float()
        return net, x, calibration_batches(datamodule, 256, 64, 0)

    from litforge.models.nets import build_net as build

    channels, height, width = (int(v) for v in args.shape.split(","))
    cfg = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "model" / f"{args.model}.yaml"))
    torch.manual_seed(0)
    net = build(cfg, in_channels=channels, image_size=(height, width), num_classes=args.classes).eval()
    x = torch.randn(max(args.batch_sizes + [256]), channels, height, width)
    return net, x, [x[i : i + 64] for i in range(0, 256, 64)]


def main(argv: list[str] | None = None) -> list[list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="mlp", help="a conf/model/ option (ignored with --ckpt)")
    parser.add_argument("--shape", default="1,8,8", help="C,H,W of the input images (ignored with --ckpt)")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--ckpt", default=None, help="time a trained litforge checkpoint instead")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--threads", nargs="+", default=["1", "all"])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--compile", action="store_true", help="add torch.compile (slow first compile)")
    parser.add_argument("--skip", nargs="*", default=[], help="variant names to leave out")
    args = parser.parse_args(argv)

    import torch

    from litforge.callbacks.qat import convert_int8
    from litforge.deploy.latency import markdown_table, measure, onnx_runner, resolve_threads, torch_runner
    from litforge.deploy.onnx import export_onnx
    from litforge.deploy.quantize import preprocess_for_quantization, quantize_onnx_dynamic, quantize_onnx_static

    net, x, calib = build_net(args)
    variants = {"eager fp32": torch_runner(net)}
    if x.dim() == 4:
        variants["eager channels_last"] = torch_runner(
            net.to(memory_format=torch.channels_last), memory_format=torch.channels_last
        )
        net = net.to(memory_format=torch.contiguous_format)
    variants["eager bf16 autocast"] = torch_runner(net, dtype=torch.bfloat16)
    if args.compile:
        variants["torch.compile fp32"] = torch_runner(torch.compile(net))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        onnx_path = export_onnx(net, x[:2], folder / "model.onnx")
        variants["onnxruntime fp32"] = onnx_runner(str(onnx_path))
        pre = preprocess_for_quantization(onnx_path, folder / "pre.onnx")
        variants["onnxruntime int8 dynamic"] = onnx_runner(str(quantize_onnx_dynamic(pre, folder)))
        variants["onnxruntime int8 static QDQ"] = onnx_runner(str(quantize_onnx_static(pre, folder, calib)))
        variants["torchao int8 dynamic eager"] = torch_runner(convert_int8(net))
        variants = {k: v for k, v in variants.items() if k not in set(args.skip)}
        threads = resolve_threads(args.threads)
        inputs = {b: x[:b].contiguous() if len(x) >= b else x[:1].repeat(b, 1, 1, 1) for b in args.batch_sizes}
        result = measure(variants, inputs, threads, rounds=args.rounds)

    header = ["variant"] + [f"b{b} t{t} ms (x fp32)" for t in threads for b in args.batch_sizes]
    rows = []
    for name in variants:
        row = [name]
        for t in threads:
            for b in args.batch_sizes:
                ms, base = result.get(name, b, t), result.get("eager fp32", b, t)
                row.append(f"{ms:.3f} ({base / ms:.2f}x)")
        rows.append(row)
    what = args.ckpt or f"{args.model} on {args.shape}"
    print(
        f"\nCPU inference latency, {what}: median of {args.rounds} interleaved rounds per figure; "
        "(x fp32) = speed-up over eager fp32 at the same batch size and threads\n"
    )
    print(markdown_table(header, rows))
    return rows


if __name__ == "__main__":
    main()
