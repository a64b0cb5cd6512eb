"""Model architectures, each built from the dataset's input shape and class count.

All are plain modules without running statistics (no BatchNorm buffers), so ``vmap`` over nodes is exact
and every trainable parameter is exchanged (as in Pasquini et al.'s code).
"""

import math
from typing import Literal

import torch
from torch import nn

from decpriv.errors import bad_value
from decpriv.models.functional import FunctionalModel

Reduction = Literal["mean", "sum"] | None  # how a node's loss adds its samples; null: the protocol's way
Activation = Literal["relu", "sigmoid", "tanh"]


def _needs_images(name: str, input_shape: tuple[int, ...]) -> None:
    if len(input_shape) != 3:
        raise bad_value(
            "model",
            name,
            f"a convolutional network reads images (channels, height, width), and the data gives inputs of "
            f"shape {tuple(input_shape)}",
            "use model=mlp or model=softmax, or image data (data=digits, mnist, cifar10)",
        )


def _classifier(name: str, num_classes: int) -> None:
    """A classifier needs classes: regression data (least_squares, num_classes 0) is refused naming the fix."""
    if num_classes < 2:
        raise bad_value(
            "model",
            name,
            f"this model classifies, and the data has {num_classes} classes (a regression task)",
            "use model=linear_regression for regression data, or classification data (data=digits)",
        )


def logistic(
    input_shape: tuple[int, ...],
    num_classes: int,
    reduction: Reduction = "mean",
    bias: bool = True,
    init_value: float | None = None,
) -> FunctionalModel:
    """Binary logistic regression: one output, sigmoid, binary cross-entropy (labels 0/1)."""
    if num_classes != 2:
        raise bad_value(
            "model",
            "logistic",
            f"binary logistic regression needs two classes, and the data has {num_classes}",
            "use model=softmax (multinomial) or two-class data (data=breast_cancer, gaussian_classes)",
        )
    module = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), 1, bias=bias))
    return FunctionalModel(module, "binary_cross_entropy", reduction, init_value)


def softmax(
    input_shape: tuple[int, ...],
    num_classes: int,
    reduction: Reduction = "mean",
    bias: bool = True,
    init_value: float | None = None,
) -> FunctionalModel:
    """Multinomial logistic (softmax) regression."""
    _classifier("softmax", num_classes)
    module = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes, bias=bias))
    return FunctionalModel(module, "cross_entropy", reduction, init_value)


def linear_regression(
    input_shape: tuple[int, ...],
    num_classes: int,
    reduction: Reduction = "sum",
    bias: bool = False,
    init_value: float | None = None,
) -> FunctionalModel:
    """x -> <w, x> with loss 1/2 (<w,x> - y)^2 summed over samples (DECOR's quadratics with bias=false)."""
    module = nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), 1, bias=bias))
    return FunctionalModel(module, "half_squared_error", reduction, init_value)


def mlp(
    input_shape: tuple[int, ...],
    num_classes: int,
    hidden: tuple[int, ...] = (100,),
    activation: Activation = "relu",
    reduction: Reduction = "mean",
    init_value: float | None = None,
) -> FunctionalModel:
    """Fully connected network (Yu 2023's 2-layer perceptron has hidden=(100,), ReLU)."""
    _classifier("mlp", num_classes)
    act = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}[activation]
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(input_shape)
    for h in hidden:
        layers += [nn.Linear(width, h), act()]
        width = h
    layers.append(nn.Linear(width, num_classes))
    return FunctionalModel(nn.Sequential(*layers), "cross_entropy", reduction, init_value)


def cnn(
    input_shape: tuple[int, ...],
    num_classes: int,
    channels: tuple[int, ...] = (12, 24),
    hidden: int = 64,
    activation: Activation = "sigmoid",
    reduction: Reduction = "mean",
    init_value: float | None = None,
) -> FunctionalModel:
    """LeNet-style CNN for 8x8, 28x28 or 32x32 inputs: conv(5x5, same) + activation (+2x2 pool when the
    side allows), then a hidden linear layer. Sigmoid by default: smooth, so gradient inversion works
    (Zhu et al.'s DLG LeNet uses sigmoid)."""
    _classifier("cnn", num_classes)
    _needs_images("cnn", input_shape)
    act = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}[activation]
    c, side = input_shape[0], input_shape[-1]
    layers: list[nn.Module] = []
    for width in channels:
        layers += [nn.Conv2d(c, width, 5, padding=2), act()]
        if side >= 8:
            layers.append(nn.AvgPool2d(2))
            side //= 2
        c = width
    layers += [nn.Flatten(), nn.Linear(c * side * side, hidden), act(), nn.Linear(hidden, num_classes)]
    return FunctionalModel(nn.Sequential(*layers), "cross_entropy", reduction, init_value)


class _ZeroGroupNorm(nn.GroupNorm):
    """GroupNorm whose scale starts at zero: the residual branch it ends starts switched off, so each block
    starts as its shortcut (Goyal et al. 2017, "Accurate, Large Minibatch SGD", Sec. 5.1, zero gamma).
    With one, the default run with model=resnet20 (D-SGD, lr 0.5, digits_small) reaches test accuracy 0.43
    in 20 rounds and 0.914 in its 100; with the plain init its loss jumps to 14.6 in two rounds and it
    stays at chance (0.094 after 20)."""

    def reset_parameters(self) -> None:
        super().reset_parameters()
        nn.init.zeros_(self.weight)


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, groups: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            nn.GroupNorm(groups, cout),
            nn.ReLU(),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            _ZeroGroupNorm(groups, cout),
        )
        self.skip = (
            nn.Identity()
            if stride == 1 and cin == cout
            else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.GroupNorm(groups, cout))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.skip(x))


def resnet20(
    input_shape: tuple[int, ...],
    num_classes: int,
    width: int = 16,
    groups: int = 4,
    reduction: Reduction = "mean",
    init_value: float | None = None,
) -> FunctionalModel:
    """ResNet-20 (He et al. 2016, CIFAR variant: 3 stages x 3 basic blocks, widths 16/32/64).

    GroupNorm replaces BatchNorm so the model has no running statistics: vmap over nodes stays exact and
    every state a node holds is exchanged.
    """
    _classifier("resnet20", num_classes)
    _needs_images("resnet20", input_shape)
    layers: list[nn.Module] = [
        nn.Conv2d(input_shape[0], width, 3, 1, 1, bias=False),
        nn.GroupNorm(groups, width),
        nn.ReLU(),
    ]
    cin = width
    for stage, w in enumerate((width, 2 * width, 4 * width)):
        for block in range(3):
            layers.append(_Block(cin, w, 2 if stage > 0 and block == 0 else 1, groups))
            cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return FunctionalModel(nn.Sequential(*layers), "cross_entropy", reduction, init_value)
