"""Built-in models, defined in plain torch so they need no download and no torchvision.

>>> model, inputs = build("resnet18", batch_size=1)
>>> type(model).__name__, tuple(inputs[0].shape)
('ResNet', (1, 3, 224, 224))
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

__all__ = ["ResNet", "MODELS", "build"]


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """The torchvision ResNet architecture (same module names and shapes)."""

    def __init__(self, block: type, layers: list[int], num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block: type, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _image_inputs(batch_size: int) -> tuple[torch.Tensor]:
    return (torch.randn(batch_size, 3, 224, 224),)


#: name -> (builder, inputs(batch_size))
MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[int], tuple]]] = {
    "resnet18": (lambda: ResNet(BasicBlock, [2, 2, 2, 2]), _image_inputs),
    "resnet34": (lambda: ResNet(BasicBlock, [3, 4, 6, 3]), _image_inputs),
    "resnet50": (lambda: ResNet(Bottleneck, [3, 4, 6, 3]), _image_inputs),
}


def build(name: str, batch_size: int = 1) -> tuple[nn.Module, tuple]:
    """A built-in model (in eval mode) and example inputs for it."""
    if name not in MODELS:
        raise ValueError(f"name: expected one of {', '.join(sorted(MODELS))}, got {name!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
    builder, inputs = MODELS[name]
    return builder().eval(), inputs(batch_size)
