"""The prediction job: run a checkpoint on new images (a file or a folder) or on its test split; write a CSV."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from litforge.config.validation import check_run
from litforge.data.images import find_images, load_image_tensor
from litforge.jobs.settings import JobSettings


def predict(cfg: DictConfig) -> dict[str, Any]:
    check_run(cfg, JobSettings)

    import torch

    from litforge.checkpointing.restore import inference_device, load_for_inference

    task, datamodule, _ = load_for_inference(cfg)
    device = inference_device(str(cfg.get("device", "auto")))
    task.to(device)
    rows: list[dict[str, Any]] = []
    if cfg.get("input"):
        files = find_images(str(cfg.input))  # for a folder: the files data=image_folder would train on
        channels, height, width = datamodule.input_shape
        datamodule.ensure_stats()
        names = [str(f) for f in files]
        decoder = getattr(datamodule, "decoder", "torchvision")  # the decoder training used (data.decoder)
        images = torch.stack([load_image_tensor(f, channels, (height, width), decoder) for f in files])
        labels = None
    else:
        images, labels = datamodule.split_arrays("test")
        if hasattr(datamodule, "split_samples"):  # data read from files (image_folder): name each row by its file
            names = [path for path, _ in datamodule.split_samples("test")]
        else:
            names = [f"test[{i}]" for i in range(len(images))]
    class_names = task.class_names
    with torch.inference_mode():
        for start in range(0, len(images), int(cfg.batch_size)):
            batch = datamodule.normalize(images[start : start + int(cfg.batch_size)]).to(device)
            out = task.predict_step(batch, 0)
            for offset, (pred, conf) in enumerate(
                zip(out["predicted"].tolist(), out["confidence"].tolist(), strict=True)
            ):
                index = start + offset
                row = {
                    "input": names[index],
                    "predicted": pred,
                    "class_name": class_names[pred],
                    "confidence": round(conf, 6),
                }
                if labels is not None:
                    row["label"] = int(labels[index])
                rows.append(row)
    output = Path(str(cfg.output)) if cfg.get("output") else Path(cfg.paths.output_dir) / "predictions.csv"
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    metrics: dict[str, float | int] = {"predictions": len(rows)}  # a count, shown as one
    if labels is not None:
        metrics["accuracy"] = sum(r["predicted"] == r["label"] for r in rows) / len(rows)
    return {"metrics": metrics, "written": str(output), "output_dir": str(cfg.paths.output_dir)}
