"""Small CNNs from the FL literature: McMahan et al.'s FedAvg CNN and the FedSUM seed's three CNNs.

All of them adapt to the input's channels and spatial size: the convolutional trunk is built
from ``input_shape[0]`` and the width of the first fully connected layer is measured with one
dummy forward pass at build time (a zeros tensor, so it draws no random numbers and does not
disturb the torch seed stream).

No Dropout anywhere, even where the source architecture has it: the simulator's seeded
randomness streams cannot reach dropout masks, so dropout would make client updates
irreproducible.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

import torch
from torch import nn

from ..config.base import NoOptions, StrictModel
from .registry import MODELS


class ConvNet(nn.Module):
    """``features`` (conv trunk) → flatten → ``classifier`` (MLP head)."""

    def __init__(self, features: nn.Sequential, classifier: nn.Sequential):
        super().__init__()
        self.features = features
        self.classifier = classifier

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def _check_image_shape(input_shape: Sequence[int], min_hw: int, name: str) -> tuple[int, int, int]:
    if len(input_shape) != 3:
        raise ValueError(f"{name} needs image inputs (C, H, W); got input_shape={tuple(input_shape)}")
    c, h, w = (int(s) for s in input_shape)
    if c < 1 or h < min_hw or w < min_hw:
        raise ValueError(f"{name} needs C >= 1 and H, W >= {min_hw}; got input_shape={tuple(input_shape)}")
    return c, h, w


def _flat_features(features: nn.Module, input_shape: Sequence[int]) -> int:
    """Width of ``features``' flattened output, measured with a zeros dummy forward."""
    with torch.no_grad():
        out = features(torch.zeros(1, *input_shape))
    return math.prod(out.shape[1:])


def _conv_relu_pool_trunk(in_ch: int, channels: Sequence[int], kernel: int) -> nn.Sequential:
    """[Conv(k, stride 1, 'same' padding) → ReLU → MaxPool(2, 2)] per entry of ``channels``."""
    layers: list[nn.Module] = []
    for out_ch in channels:
        layers += [nn.Conv2d(in_ch, out_ch, kernel, stride=1, padding=kernel // 2), nn.ReLU(),
                   nn.MaxPool2d(kernel_size=2, stride=2)]
        in_ch = out_ch
    return nn.Sequential(*layers)


def _mlp_head(in_features: int, hidden: Sequence[int], num_classes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(in_features, h), nn.ReLU()]
        in_features = h
    layers.append(nn.Linear(in_features, num_classes))
    return nn.Sequential(*layers)


@torch.no_grad()
def _kaiming_hidden_layers(net: ConvNet) -> None:
    """Kaiming-normal (fan_in, ReLU gain) weights and zero biases on every conv and hidden Linear.

    This mirrors the FedAWE / IBM-fedau model files (``init_weights`` applied to ``self.conv`` and
    ``self.fc1`` only): the final output Linear keeps PyTorch's default initialisation.
    """
    output_layer = net.classifier[-1]
    for m in net.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)) and m is not output_layer:
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)


@MODELS.register("cnn_fedavg")
class CNNFedAvg:
    """FedAvg CNN of McMahan et al. 2017 (conv5x5 32 → pool → conv5x5 64 → pool → fc 512 → fc C)."""

    # 'same' padding (2 for 5x5) keeps the spatial size through each conv, so on 28x28 MNIST the
    # flatten width is 64*7*7 = 3136 and the parameter count is the well-known 1,663,370; any
    # H, W >= 4 works (the two 2x2 pools then leave at least 1x1).
    Config = NoOptions

    @classmethod
    def build(cls, cfg: StrictModel, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        c, _, _ = _check_image_shape(input_shape, 4, "cnn_fedavg")
        features = _conv_relu_pool_trunk(c, (32, 64), kernel=5)
        classifier = _mlp_head(_flat_features(features, input_shape), (512,), num_classes)
        return ConvNet(features, classifier)


# --- The FedSUM seed's CNNs (You & Pu, arXiv 2512.18275, Appendix H.2, Table 2) -----------------
#
# Table 2 (legible in the seed text), with the footnote "C(in, out): 2D conv, kernel 3, stride 1,
# padding 1; R: ReLU; M: max-pool kernel 2 stride 2; L(out): linear; D: dropout p=0.2":
#   MNIST    C(1,10)-R-M-C(10,20)-D-R-M-L(50)-R-D-L(10)
#   SVHN     C(3,32)-R-M-C(32,32)-R-M-L(128)-R-L(10)
#   CIFAR-10 C(3,32)-R-M-C(32,32)-R-M-L(256)-R-L(64)-R-L(10)
# What we follow:
# * SVHN and CIFAR-10 are exactly IBM/fedau's (and so FedAWE's, the code base FedSUM builds on)
#   ``cnn_svhn.py`` / ``cnn_cifar10.py``, including their init: Kaiming-normal weights and zero
#   biases on the convs and hidden Linears, PyTorch default init on the output Linear.
# * MNIST is the old PyTorch-examples MNIST net (10/20 channels, fc 50) with the table's 3x3
#   kernels. Its two dropout layers are omitted (see module docstring). The FedAWE code has no model
#   of this shape, so its init is unknown; we default to the same Kaiming init as the other two
#   (FedSUM's authors presumably adapted the FedAWE model template, whose 3x3/pad-1 convs this
#   table shares) and offer ``init: torch`` for PyTorch's default.
# * Input channels come from ``input_shape`` and the first Linear's width from a dummy forward,
#   so e.g. the CIFAR net also runs on 1x28x28 inputs.


class _FedSUMCNN:
    channels: tuple[int, ...] = ()
    hidden: tuple[int, ...] = ()

    class Config(StrictModel):
        init: Literal["kaiming", "torch"] = "kaiming"
        """'kaiming': Kaiming-normal + zero biases on convs and hidden Linears (FedAWE code);
        'torch': PyTorch's default layer initialisation."""

    @classmethod
    def build(cls, cfg: "_FedSUMCNN.Config", input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        name = getattr(cls, "registry_name", cls.__name__)
        c, _, _ = _check_image_shape(input_shape, 4, name)
        features = _conv_relu_pool_trunk(c, cls.channels, kernel=3)
        classifier = _mlp_head(_flat_features(features, input_shape), cls.hidden, num_classes)
        net = ConvNet(features, classifier)
        if cfg.init == "kaiming":
            _kaiming_hidden_layers(net)
        return net


@MODELS.register("cnn_fedsum_mnist")
class CNNFedSUMMnist(_FedSUMCNN):
    """FedSUM's MNIST CNN: C(1,10)-R-M-C(10,20)-R-M-L(50)-R-L(C), 3x3 convs, dropout omitted."""

    channels = (10, 20)
    hidden = (50,)


@MODELS.register("cnn_fedsum_svhn")
class CNNFedSUMSvhn(_FedSUMCNN):
    """FedSUM/FedAWE SVHN CNN: C(3,32)-R-M-C(32,32)-R-M-L(128)-R-L(C), Kaiming init."""

    channels = (32, 32)
    hidden = (128,)


@MODELS.register("cnn_fedsum_cifar10")
class CNNFedSUMCifar10(_FedSUMCNN):
    """FedSUM/FedAWE CIFAR-10 CNN: C(3,32)-R-M-C(32,32)-R-M-L(256)-R-L(64)-R-L(C), Kaiming init."""

    channels = (32, 32)
    hidden = (256, 64)


__all__ = ["ConvNet", "CNNFedAvg", "CNNFedSUMMnist", "CNNFedSUMSvhn", "CNNFedSUMCifar10"]
