"""The built-in models: well-known architectures, built offline with random weights.

The ResNets are defined here in plain torch (torchvision's layout, no torchvision needed);
every other entry is a transformers model built from its published hyper-parameters
(:mod:`flopsight.cli.zoo.configs`), so it needs transformers but never a download. :data:`ZOO`
holds the entries, :func:`lookup` finds one by name (or alias, with a did-you-mean),
:func:`input_specs` says what each is called with by default and :func:`make_inputs`
makes those tensors, on any device.

>>> model, inputs = build("resnet18", batch_size=1)
>>> type(model).__name__, tuple(inputs[0].shape)
('ResNet', (1, 3, 224, 224))
>>> lookup("Llama_3_70B").name, lookup("resnet50").name
('llama-3-70b', 'resnet-50')
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..._checks import check_int
from .configs import ARCHITECTURES, Architecture

__all__ = [
    "ResNet",
    "MODELS",
    "build",
    "ZooEntry",
    "ZOO",
    "UnknownModel",
    "lookup",
    "suggest",
    "InputSpec",
    "input_kind",
    "input_specs",
    "make_inputs",
    "max_tokens",
    "describe_specs",
    "image_shape",
    "build_transformers",
    "param_count",
]


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

    def __init__(self, block: type[BasicBlock | Bottleneck], layers: list[int], num_classes: int = 1000):
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

    def _make_layer(self, block: type[BasicBlock | Bottleneck], planes: int, blocks: int,
                    stride: int = 1) -> nn.Sequential:
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


#: name -> (builder, inputs(batch_size)): the plain-torch models, by their first names
MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[int], tuple]]] = {
    "resnet18": (lambda: ResNet(BasicBlock, [2, 2, 2, 2]), _image_inputs),
    "resnet34": (lambda: ResNet(BasicBlock, [3, 4, 6, 3]), _image_inputs),
    "resnet50": (lambda: ResNet(Bottleneck, [3, 4, 6, 3]), _image_inputs),
}


def build(name: str, batch_size: int = 1) -> tuple[nn.Module, tuple]:
    """A plain-torch built-in model (in eval mode) and example inputs for it.

    >>> build("resnet-34")[0].layer3[5].conv2
    Conv2d(256, 256, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)
    """
    legacy = {_key(n): n for n in MODELS}
    if _key(name) not in legacy:
        raise ValueError(f"name: expected one of {', '.join(sorted(MODELS))}, got {name!r}")
    check_int(batch_size, "batch_size", low=1)
    builder, inputs = MODELS[legacy[_key(name)]]
    return builder().eval(), inputs(batch_size)


# -- inputs --------------------------------------------------------------------------------
@dataclass(frozen=True)
class InputSpec:
    """One input a model is called with: its keyword (``""``: the one positional argument),
    its shape, and what it holds: ``"ids"`` (token ids below ``vocab``), ``"ones"`` (an
    attention mask) or ``"float"`` (random values in the model's dtype)."""

    name: str
    shape: tuple[int, ...]
    holds: str = "float"
    vocab: int = 0


def input_kind(config: Any) -> str:
    """What a transformers model built from ``config`` takes (one of
    :data:`~flopsight.cli.zoo.configs.INPUT_KINDS`), read from the config's fields.

    >>> from types import SimpleNamespace as C
    >>> input_kind(C(vocab_size=10, is_encoder_decoder=True)), input_kind(C(num_channels=3, image_size=32))
    ('text2text', 'image')
    """
    if config is None:
        return "tensor"
    if getattr(config, "text_config", None) is not None and getattr(config, "vision_config", None) is not None:
        return "text+image"
    if getattr(config, "num_mel_bins", None):
        return "speech"
    if getattr(config, "vocab_size", None):
        return "text2text" if getattr(config, "is_encoder_decoder", False) else "text"
    if getattr(config, "num_channels", None) or getattr(config, "image_size", None):
        return "image"
    raise ValueError(f"cannot tell what a {type(config).__name__} model takes (no vocab_size, num_mel_bins, "
                     "num_channels or image_size); profile it through a factory that returns its inputs")


def _vocab(config: Any) -> int:
    return getattr(config, "vocab_size", None) or config.text_config.vocab_size


def image_shape(config: Any) -> tuple[int, int, int]:
    """(channels, height, width) of the images a model takes: its vision config's, else
    (``config`` None too) 3x224x224."""
    vision = getattr(config, "vision_config", None) or config
    size = getattr(vision, "image_size", None) or 224
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    return (getattr(vision, "num_channels", None) or 3, height, width)


def _rope(config: Any) -> bool:
    return bool(getattr(config, "rope_parameters", None) or getattr(config, "rope_theta", None))


# positions of these start after the padding index: max_position_embeddings - (pad + 1) tokens fit
_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert")


def max_tokens(config: Any) -> int | None:
    """The most tokens a model's learned position table holds (the decoder's for speech
    models), None when it has no such limit (rotary or relative positions).

    >>> import transformers
    >>> (max_tokens(transformers.GPT2Config()), max_tokens(transformers.LlamaConfig()),
    ...  max_tokens(transformers.T5Config()))
    (1024, None, None)
    """
    if config is None:
        return None
    kind = input_kind(config)
    if kind == "speech":
        return getattr(config, "max_target_positions", None)
    text = config.text_config if kind == "text+image" else config
    if _rope(text) or getattr(text, "relative_attention_num_buckets", None):
        return None
    limit = getattr(text, "max_position_embeddings", None)
    if limit and getattr(text, "model_type", "") in _OFFSET_POSITIONS:
        limit -= (getattr(text, "pad_token_id", None) or 0) + 1
    return limit


def input_specs(kind: str, config: Any = None, *, batch_size: int = 1, seq_len: int = 128,
                input_shape: tuple[int, ...] | None = None, generate: bool = False) -> list[InputSpec]:
    """The inputs a model of ``kind`` is called with by default. Text is ``seq_len`` token
    ids (the same number of decoder ids for encoder-decoders); images are the config's
    size unless ``input_shape`` (one sample's shape) says otherwise; speech is 30 s of
    audio (the encoder's whole window). ``generate``: what ``generate()`` takes instead
    (a prompt and its attention mask, no decoder ids).

    >>> [(s.name, s.shape) for s in input_specs("text2text", batch_size=2, seq_len=8)]
    [('input_ids', (2, 8)), ('decoder_input_ids', (2, 8))]
    >>> [(s.name, s.shape) for s in input_specs("tensor", input_shape=(3, 32, 32))]
    [('', (1, 3, 32, 32))]
    """
    b = batch_size
    if kind in ("tensor", "image"):
        shape = tuple(input_shape) if input_shape else (image_shape(config) if config is not None else (3, 224, 224))
        return [InputSpec("" if kind == "tensor" else "pixel_values", (b, *shape))]
    ids = InputSpec("input_ids", (b, seq_len), "ids", _vocab(config) if config is not None else 0)
    if kind == "text+image":
        return [ids, InputSpec("pixel_values", (b, *(input_shape or image_shape(config))))]
    mask = InputSpec("attention_mask", (b, seq_len), "ones")
    decoder = InputSpec("decoder_input_ids", (b, seq_len), "ids", ids.vocab)
    if kind == "text":
        return [ids, mask] if generate else [ids]
    if kind == "text2text":
        return [ids, mask] if generate else [ids, decoder]
    if kind == "speech":
        frames = 2 * config.max_source_positions  # the encoder's two convs halve it to its positions
        features = InputSpec("input_features", (b, config.num_mel_bins, frames))
        return [features] if generate else [features, decoder]
    raise ValueError("kind: expected one of "
                     f"{', '.join(('tensor', 'image', 'text', 'text2text', 'speech', 'text+image'))}, "
                     f"got {kind!r}")


def make_inputs(specs: list[InputSpec], *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                seed: int = 0) -> tuple[tuple, dict]:
    """(args, kwargs) holding ``specs``' tensors: random (seeded) on a real device, empty
    on meta (nothing is allocated, not even on the CPU first).

    >>> args, kwargs = make_inputs([InputSpec("input_ids", (1, 4), "ids", 50)], device="meta")
    >>> args, kwargs["input_ids"].shape, kwargs["input_ids"].dtype
    ((), torch.Size([1, 4]), torch.int64)
    """
    device = torch.device(device)
    generator = torch.Generator().manual_seed(seed)
    args, kwargs = [], {}
    for spec in specs:
        tensor_dtype = dtype if spec.holds == "float" else torch.long
        if device.type == "meta":
            tensor = torch.empty(spec.shape, dtype=tensor_dtype, device=device)
        elif spec.holds == "ids":
            # above the ids most vocabularies reserve for padding and special tokens
            low = min(4, spec.vocab - 1)
            tensor = torch.randint(low, spec.vocab, spec.shape, generator=generator).to(device)
        elif spec.holds == "ones":
            tensor = torch.ones(spec.shape, dtype=tensor_dtype, device=device)
        else:
            tensor = torch.randn(spec.shape, generator=generator).to(device=device, dtype=tensor_dtype)
        if spec.name:
            kwargs[spec.name] = tensor
        else:
            args.append(tensor)
    return tuple(args), kwargs


def describe_specs(specs: list[InputSpec]) -> str:
    """``"input_ids [1, 128], decoder_input_ids [1, 128]"``, the positional one as ``x``."""
    return ", ".join(f"{s.name or 'x'} [{', '.join(map(str, s.shape))}]" for s in specs)


# -- the zoo -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ZooEntry:
    """A built-in model: a transformers ``architecture`` or a plain-torch ``torch_builder``."""

    name: str
    family: str
    source: str
    inputs: str
    seq_len: int | None = None  # default tokens; None: the model takes none
    aliases: tuple[str, ...] = field(default=())
    architecture: Architecture | None = None
    torch_builder: Callable[[], nn.Module] | None = None

    @property
    def needs_transformers(self) -> bool:
        return self.architecture is not None

    def config(self) -> Any:
        """The transformers config (cheap: no weights), None for a plain-torch model."""
        if self.architecture is None:
            return None
        import copy

        import transformers

        return getattr(transformers, self.architecture.config)(**copy.deepcopy(self.architecture.hyper))

    def build(self, config: Any = None) -> nn.Module:
        """The model in eval mode, on torch's default device and dtype (the caller's
        ``torch.device(...)`` context and default dtype decide where and in what)."""
        if self.torch_builder is not None:
            return self.torch_builder().eval()
        if self.architecture is None:  # (every entry has one or the other)
            raise ValueError(f"{self.name}: neither a transformers architecture nor a torch builder")
        return build_transformers(self.architecture.model, config if config is not None else self.config())


def build_transformers(class_name: str, config: Any) -> nn.Module:
    """``transformers.<class_name>(config)`` in eval mode: random weights, nothing downloaded."""
    import transformers

    return getattr(transformers, class_name)(config).eval()


def _plain(name: str, builder: Callable[[], nn.Module], source: str, aliases: tuple[str, ...]) -> ZooEntry:
    return ZooEntry(name, "vision (plain torch)", source, "tensor", None, aliases, torch_builder=builder)


def _from_architecture(name: str, a: Architecture) -> ZooEntry:
    takes_tokens = a.inputs in ("text", "text2text", "speech", "text+image")
    return ZooEntry(name, a.family, a.source, a.inputs, a.seq_len if takes_tokens else None, a.aliases, a)


ZOO: dict[str, ZooEntry] = {name: _from_architecture(name, a) for name, a in ARCHITECTURES.items()}
ZOO.update({
    # torchvision's resnet18 / resnet34 / resnet50 (He et al., 2015), ImageNet-1k head
    "resnet-18": _plain("resnet-18", MODELS["resnet18"][0], "torchvision resnet18", ("resnet18",)),
    "resnet-34": _plain("resnet-34", MODELS["resnet34"][0], "torchvision resnet34", ("resnet34",)),
    "resnet-50": _plain("resnet-50", MODELS["resnet50"][0], "torchvision resnet50", ("resnet50",)),
})


def _key(name: str) -> str:
    """Names match whatever their case, dashes, underscores and spaces."""
    return "".join(c for c in name.lower() if c not in "-_ ")


_BY_KEY: dict[str, str] = {}
for _entry in ZOO.values():
    for _name in (_entry.name, *_entry.aliases):
        _BY_KEY.setdefault(_key(_name), _entry.name)


def _one_of(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


class UnknownModel(ValueError):
    """A name that is no zoo entry; ``suggestions`` are the closest ones."""

    def __init__(self, name: str, suggestions: list[str]):
        hint = f"; did you mean {_one_of(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown model {name!r}{hint} (flopsight list shows them all)")
        self.name, self.suggestions = name, suggestions


def suggest(name: str, n: int = 3) -> list[str]:
    """The zoo names closest to ``name`` (aliases count, the entry's name is given).

    >>> suggest("lama-3-8b")
    ['llama-3-8b', 'llama-3-70b', 'llama-2-7b']
    """
    close = difflib.get_close_matches(_key(name), list(_BY_KEY), n=2 * n, cutoff=0.6)
    return list(dict.fromkeys(_BY_KEY[k] for k in close))[:n]


def lookup(name: str) -> ZooEntry:
    """The zoo entry called ``name`` (or one of its aliases); :class:`UnknownModel` with a
    did-you-mean otherwise."""
    found = _BY_KEY.get(_key(name))
    if found is None:
        raise UnknownModel(name, suggest(name))
    return ZOO[found]


def param_count(model: nn.Module) -> int:
    """Parameters of ``model``, each unique tensor once (tied weights once)."""
    return sum(p.numel() for p in model.parameters())
