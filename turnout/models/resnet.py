"""ResNet-18 (He et al. 2016) with GroupNorm in place of BatchNorm.

Why GroupNorm: BatchNorm's running statistics are per-client state that averaging handles badly
on non-IID data (Hsieh et al. 2020, "The Non-IID Data Quagmire"); GroupNorm has no running
buffers and no dependence on batch composition, so the model is a pure function of its
parameters. The default of 2 groups follows Reddi et al. 2021 ("Adaptive Federated
Optimization"), whose CIFAR ResNet-18 the adaptive-OU seed reuses.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, field_validator
from torch import nn

from ..config.base import StrictModel
from .registry import MODELS

_WIDTHS = (64, 128, 256, 512)
_BLOCKS = (2, 2, 2, 2)  # ResNet-18


class BasicBlock(nn.Module):
    """Two 3x3 convs with a residual connection; a 1x1 projection when the shape changes."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, groups: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(groups, out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(groups, out_ch)
        self.relu = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False),
                                          nn.GroupNorm(groups, out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNetGN(nn.Module):
    def __init__(self, in_ch: int, num_classes: int, groups: int, stem: str):
        super().__init__()
        if stem == "cifar":
            # 3x3 stride-1 stem and no max-pool: 32x32 inputs keep enough resolution (4x4 at the end).
            self.stem = nn.Sequential(nn.Conv2d(in_ch, 64, 3, stride=1, padding=1, bias=False),
                                      nn.GroupNorm(groups, 64), nn.ReLU())
        else:
            self.stem = nn.Sequential(nn.Conv2d(in_ch, 64, 7, stride=2, padding=3, bias=False),
                                      nn.GroupNorm(groups, 64), nn.ReLU(),
                                      nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
        stages: list[nn.Module] = []
        ch = 64
        for i, (width, n) in enumerate(zip(_WIDTHS, _BLOCKS)):
            blocks = []
            for j in range(n):
                blocks.append(BasicBlock(ch, width, 2 if (j == 0 and i > 0) else 1, groups))
                ch = width
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(ch, num_classes)
        with torch.no_grad():  # He et al. init for convs; GroupNorm starts at weight 1, bias 0.
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.stages(self.stem(x))), 1))


@MODELS.register("resnet18_gn")
class ResNet18GN:
    """ResNet-18 with GroupNorm instead of BatchNorm (CIFAR 3x3 stem by default), for (C,H,W) images."""

    class Config(StrictModel):
        groups: int = Field(2, ge=1, le=64)
        """GroupNorm groups; must divide 64 (every stage width is a multiple of 64)."""
        stem: Literal["cifar", "imagenet"] = "cifar"
        """'cifar': 3x3 stride-1 conv, no max-pool; 'imagenet': 7x7 stride-2 conv + 3x3 max-pool."""

        @field_validator("groups")
        @classmethod
        def _divides_64(cls, v: int) -> int:
            if 64 % v:
                raise ValueError("must divide 64 (one of 1, 2, 4, 8, 16, 32, 64)")
            return v

    @classmethod
    def build(cls, cfg: "ResNet18GN.Config", input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        if len(input_shape) != 3 or min(int(s) for s in input_shape) < 1:
            raise ValueError(f"resnet18_gn needs image inputs (C, H, W); got input_shape={tuple(input_shape)}")
        return ResNetGN(int(input_shape[0]), num_classes, cfg.groups, cfg.stem)


__all__ = ["ResNet18GN", "ResNetGN", "BasicBlock"]
