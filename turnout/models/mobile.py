"""Mobile CNNs used by GlueFL / FedScale: ShuffleNet V2 (Ma et al. 2018) and MobileNet V2
(Sandler et al. 2018), written from the papers' block definitions.

Both keep BatchNorm as in the originals. Its running mean/variance are *buffers*, not
parameters: ``torch.func.functional_call(model, params, x)`` takes them from the module, and in
train mode every forward updates them in place — an FL executor must decide whether to
average, keep or reset them (FedScale averages them with the weights). Under ``torch.func.grad``
pass them explicitly, ``functional_call(model, (params, buffers), x)``: the in-place update then
lands in that ``buffers`` dict instead of failing as a mutation of a captured tensor. Dropout is left out
(MobileNet V2's reference classifiers add it; the simulator's seeded randomness streams cannot
reach dropout masks).

``stem='cifar'`` (default) adapts them to small images: a stride-1 first conv, no max-pool, and
(MobileNet V2) stride 1 in the first stride-2 bottleneck group, so a 32x32 input ends at 4x4
instead of 1x1. ``stem='imagenet'`` gives the paper layouts (total stride 32).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from ..config.base import StrictModel
from .registry import MODELS, ModelTraits


def _check_image(input_shape: tuple[int, ...], name: str) -> int:
    if len(input_shape) != 3 or min(int(s) for s in input_shape) < 1:
        raise ValueError(f"{name} needs image inputs (C, H, W); got input_shape={tuple(input_shape)}")
    return int(input_shape[0])


def _conv_bn(in_ch: int, out_ch: int, kernel: int, stride: int = 1, groups: int = 1,
             act: type[nn.Module] | None = nn.ReLU) -> nn.Sequential:
    """Conv (no bias, BN follows) → BatchNorm → optional activation."""
    layers: list[nn.Module] = [nn.Conv2d(in_ch, out_ch, kernel, stride=stride, padding=kernel // 2,
                                         groups=groups, bias=False), nn.BatchNorm2d(out_ch)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def _init_conv_bn_linear(model: nn.Module) -> None:
    """He (fan-out) init for convs, BN at identity, small normal init for the classifier."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.01)
                nn.init.zeros_(m.bias)


# --- ShuffleNet V2 ------------------------------------------------------------------------------

def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """Interleave channels across ``groups`` (reshape → transpose → reshape; no in-place ops)."""
    b, c, h, w = x.shape
    return x.reshape(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class ShuffleUnit(nn.Module):
    """ShuffleNet V2 unit (paper Fig. 3c/3d).

    stride 1: split channels in half; one half passes through, the other goes through
    1x1 conv-BN-ReLU → 3x3 depthwise-BN → 1x1 conv-BN-ReLU; concat; shuffle.
    stride 2: no split; both branches see the whole input — left: 3x3 depthwise(s2)-BN →
    1x1 conv-BN-ReLU; right: as above with a stride-2 depthwise; concat (doubles channels); shuffle.
    """

    def __init__(self, in_ch: int, out_ch: int, stride: int):
        super().__init__()
        if out_ch % 2:
            raise ValueError("ShuffleNet V2 unit output channels must be even")
        self.stride = stride
        half = out_ch // 2
        if stride == 1:
            if in_ch != out_ch:
                raise ValueError("a stride-1 ShuffleNet V2 unit keeps the channel count")
            self.left: nn.Module = nn.Identity()
            right_in = half
        else:
            self.left = nn.Sequential(_conv_bn(in_ch, in_ch, 3, stride, groups=in_ch, act=None),
                                      _conv_bn(in_ch, half, 1))
            right_in = in_ch
        self.right = nn.Sequential(_conv_bn(right_in, half, 1),
                                   _conv_bn(half, half, 3, stride, groups=half, act=None),
                                   _conv_bn(half, half, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            a, b = x.chunk(2, dim=1)
            out = torch.cat((a, self.right(b)), dim=1)
        else:
            out = torch.cat((self.left(x), self.right(x)), dim=1)
        return channel_shuffle(out, 2)


# Ma et al. 2018, Table 5: output channels of stage 2, 3, 4 and conv5 per width multiplier.
_SHUFFLE_CHANNELS: dict[float, tuple[int, int, int, int]] = {
    0.5: (48, 96, 192, 1024),
    1.0: (116, 232, 464, 1024),
    1.5: (176, 352, 704, 1024),
    2.0: (244, 488, 976, 2048),
}
_SHUFFLE_REPEATS = (4, 8, 4)  # units per stage; the first unit of each stage has stride 2


class ShuffleNetV2Net(nn.Module):
    def __init__(self, in_ch: int, num_classes: int, width: float, stem: str):
        super().__init__()
        *stage_ch, last_ch = _SHUFFLE_CHANNELS[width]
        if stem == "cifar":
            self.stem = _conv_bn(in_ch, 24, 3, stride=1)
        else:
            self.stem = nn.Sequential(_conv_bn(in_ch, 24, 3, stride=2),
                                      nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
        stages: list[nn.Module] = []
        ch = 24
        for out_ch, n in zip(stage_ch, _SHUFFLE_REPEATS):
            units = [ShuffleUnit(ch, out_ch, 2)] + [ShuffleUnit(out_ch, out_ch, 1) for _ in range(n - 1)]
            stages.append(nn.Sequential(*units))
            ch = out_ch
        self.stages = nn.Sequential(*stages)
        self.conv5 = _conv_bn(ch, last_ch, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(last_ch, num_classes)
        _init_conv_bn_linear(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv5(self.stages(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


@MODELS.register("shufflenet_v2")
class ShuffleNetV2:
    """ShuffleNet V2 (Ma et al. 2018) with BatchNorm; CIFAR-style stride-1 stem by default."""

    class Config(StrictModel):
        width: Literal[0.5, 1.0, 1.5, 2.0] = 1.0
        """Channel multiplier of the paper's Table 5 (GlueFL/FedScale use 2.0)."""
        stem: Literal["cifar", "imagenet"] = "cifar"
        """'cifar': 3x3 stride-1 conv, no max-pool; 'imagenet': 3x3 stride-2 conv + max-pool."""

    @classmethod
    def traits(cls, cfg: "ShuffleNetV2.Config") -> ModelTraits:
        return ModelTraits(running_stats=True)

    @classmethod
    def build(cls, cfg: "ShuffleNetV2.Config", input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return ShuffleNetV2Net(_check_image(input_shape, "shufflenet_v2"), num_classes, float(cfg.width), cfg.stem)


# --- MobileNet V2 -------------------------------------------------------------------------------

def _round_channels(c: float, divisor: int = 8) -> int:
    """Nearest multiple of ``divisor`` (at least ``divisor``), never more than 10% below ``c``.

    Keeps channel counts hardware-friendly under a width multiplier, as in the MobileNet
    reference implementation.
    """
    out = max(divisor, int(c + divisor / 2) // divisor * divisor)
    if out < 0.9 * c:
        out += divisor
    return out


class InvertedResidual(nn.Module):
    """MobileNet V2 bottleneck (paper Table 1): 1x1 expand (×t) -ReLU6 → 3x3 depthwise (stride s)
    -ReLU6 → 1x1 linear projection; identity shortcut when stride 1 and channels match."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, expand: int):
        super().__init__()
        hidden = in_ch * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(in_ch, hidden, 1, act=nn.ReLU6))
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   _conv_bn(hidden, out_ch, 1, act=None)]  # linear bottleneck: no activation
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and in_ch == out_ch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return x + out if self.residual else out


# Sandler et al. 2018, Table 2: (expansion t, output channels c, repeats n, first stride s).
_MOBILENET_CFG = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                  (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2Net(nn.Module):
    def __init__(self, in_ch: int, num_classes: int, width_mult: float, stem: str):
        super().__init__()
        cifar = stem == "cifar"
        ch = _round_channels(32 * width_mult)
        self.stem = _conv_bn(in_ch, ch, 3, stride=1 if cifar else 2, act=nn.ReLU6)
        blocks: list[nn.Module] = []
        for gi, (t, c, n, s) in enumerate(_MOBILENET_CFG):
            if cifar and gi == 1:
                s = 1  # with the stride-1 stem: total stride 8, so 32x32 ends at 4x4
            out_ch = _round_channels(c * width_mult)
            for j in range(n):
                blocks.append(InvertedResidual(ch, out_ch, s if j == 0 else 1, t))
                ch = out_ch
        self.blocks = nn.Sequential(*blocks)
        # The paper keeps the last conv at 1280 channels for multipliers below 1.
        last_ch = _round_channels(1280 * width_mult) if width_mult > 1.0 else 1280
        self.head_conv = _conv_bn(ch, last_ch, 1, act=nn.ReLU6)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(last_ch, num_classes)
        _init_conv_bn_linear(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head_conv(self.blocks(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


@MODELS.register("mobilenet_v2")
class MobileNetV2:
    """MobileNet V2 (Sandler et al. 2018) with BatchNorm; CIFAR-style stride-1 stem by default."""

    class Config(StrictModel):
        width_mult: float = Field(1.0, gt=0, le=100.0)
        """Width multiplier; channels are rounded to multiples of 8."""
        stem: Literal["cifar", "imagenet"] = "cifar"
        """'cifar': stride-1 first conv and stride 1 in the 24-channel group; 'imagenet': as the paper."""

    @classmethod
    def traits(cls, cfg: "MobileNetV2.Config") -> ModelTraits:
        return ModelTraits(running_stats=True)

    @classmethod
    def build(cls, cfg: "MobileNetV2.Config", input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return MobileNetV2Net(_check_image(input_shape, "mobilenet_v2"), num_classes, cfg.width_mult, cfg.stem)


__all__ = ["ShuffleNetV2", "MobileNetV2", "ShuffleNetV2Net", "MobileNetV2Net", "ShuffleUnit",
           "InvertedResidual", "channel_shuffle"]
