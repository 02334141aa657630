"""Classify images with a model from `python export.py`; needs only onnxruntime, numpy and Pillow.
Usage: python examples/classify_onnx.py model.onnx photo.jpg [more.jpg ...] (the metadata says how to feed it)"""
import json
import sys

import numpy as np
import onnxruntime as ort
from PIL import Image

session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
meta = session.get_modelmeta().custom_metadata_map  # input size, colour mode, dtype, class names, version, commit
height, width = json.loads(meta["input_size"])
for path in sys.argv[2:]:
    image = Image.open(path).convert(meta["color_mode"]).resize((width, height), Image.Resampling.BILINEAR)
    x = np.asarray(image, dtype=np.uint8).reshape(height, width, -1).transpose(2, 0, 1)[None]  # HWC → NCHW, batch 1
    x = x if meta["input_dtype"] == "uint8" else x.astype(np.float32) / 255  # float32 exports take [0, 1]
    logits = session.run(None, {meta["input_name"]: x})[0]
    print(path, json.loads(meta["class_names"])[int(logits.argmax())])
