"""Image classification nets, all plain `torch.nn.Module`s (no Lightning), so they can be reused anywhere.

- :class:`litforge.models.mlp.MLP`: flattens the image; the fastest baseline and a sanity check for the pipeline.
- :class:`litforge.models.cnn.CNN`: small conv3x3-BN-ReLU stages with global average pooling.
- :class:`litforge.models.resnet.ResNet`: torchvision ResNet-18/34/50, optionally pretrained, adapted to small inputs.
- :class:`litforge.models.vit.VisionTransformer`: a small pre-norm ViT laid out for FSDP / tensor parallelism.

Shared constructor convention: every image net takes ``in_channels``, ``image_size`` (H, W) and ``num_classes``
first. The task fills these in from the datamodule's shape, so a config only sets each net's own knobs (width,
depth, dropout, ...) and any ``model=`` works with any ``data=``.

This file deliberately imports nothing: importing ``litforge.models`` must not import torch, so the CLI and config
composition stay fast. Import the concrete module (e.g. ``litforge.models.cnn``) where a net is built.
"""
