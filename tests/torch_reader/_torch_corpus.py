"""Checkpoints written by real torch, and zip surgery on them (for corrupt and malicious files)."""

from __future__ import annotations

import argparse
import random
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch


class RunConfig:
    """A user class pickled into a checkpoint (stands in for OmegaConf / dataclass configs)."""

    def __init__(self, depth: int, name: str) -> None:
        self.depth = depth
        self.name = name


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))


def _trained() -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for _ in range(2):
        model(torch.randn(5, 4)).sum().backward()
        optimizer.step()
        scheduler.step()
    return model, optimizer, scheduler


def training_state() -> dict[str, Any]:
    model, optimizer, scheduler = _trained()
    np.random.seed(1)
    random.seed(2)
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": torch.amp.GradScaler("cpu").state_dict(),
        "epoch": 3,
        "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()},
        "args": argparse.Namespace(lr=0.01, name="run", layers=[4, 8]),
        "metric": np.float64(0.25),
        "device": torch.device("cpu"),
        "dtype": torch.bfloat16,
        "blob": b"\x00\xffraw",
        "tags": {"a", "b"},
    }


def all_dtypes() -> dict[str, torch.Tensor]:
    base = torch.linspace(-3, 3, 24).reshape(2, 3, 4)
    return {
        "float32": base,
        "float64": base.double(),
        "float16": base.half(),
        "bfloat16": base.bfloat16(),
        "int64": torch.arange(24).reshape(4, 6),
        "int32": torch.arange(6, dtype=torch.int32),
        "int16": torch.arange(6, dtype=torch.int16),
        "int8": torch.arange(-3, 3, dtype=torch.int8),
        "uint8": torch.arange(6, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "complex64": torch.complex(base, -base),
        "complex128": torch.complex(base.double(), base.double()),
        "float8_e4m3fn": base.to(torch.float8_e4m3fn),
        "float8_e5m2": base.to(torch.float8_e5m2),
        "uint16": torch.arange(6).to(torch.uint16),
        "uint32": torch.arange(6).to(torch.uint32),
        "uint64": torch.arange(6).to(torch.uint64),
        "scalar": torch.tensor(1.5),
        "empty": torch.zeros(0, 3),
    }


def views() -> dict[str, torch.Tensor]:
    base = torch.arange(24, dtype=torch.float32)
    grid = base.view(4, 6)
    return {
        "base": base,
        "row": grid[2],
        "transposed": grid.t(),
        "every_other": base[1::2],
        "column": grid[:, 3],
        "broadcast": base[:3].view(3, 1).expand(3, 5),
        "block": grid[1:3, 2:5],
    }


def parameters() -> dict[str, Any]:
    trained = torch.nn.Parameter(torch.ones(2, 2))
    frozen = torch.nn.Parameter(torch.zeros(3), requires_grad=False)
    tagged = torch.nn.Parameter(torch.full((2,), 3.0))
    tagged.note = "with python state"
    annotated = torch.ones(3)
    annotated.unit = "m/s"
    return {"trained": trained, "frozen": frozen, "tagged": tagged, "annotated": annotated,
            "conj": torch.complex(torch.ones(2), torch.ones(2)).conj()}  # fmt: skip


def quantized() -> dict[str, torch.Tensor]:
    values = torch.linspace(-1, 1, 8).reshape(2, 4)
    return {
        "per_tensor": torch.quantize_per_tensor(values, scale=0.1, zero_point=3, dtype=torch.qint8),
        "per_channel": torch.quantize_per_channel(
            values, torch.tensor([0.1, 0.2]), torch.tensor([0, 1]), axis=0, dtype=torch.quint8
        ),
    }


def user_objects() -> dict[str, Any]:
    return {"config": RunConfig(3, "deep"), "config_type": RunConfig, "weights": torch.ones(2)}


PLAIN_CORPUS: dict[str, Callable[[], Any]] = {
    "state_dict.pt": lambda: _model().state_dict(),
    "training.pt": training_state,
    "dtypes.pt": all_dtypes,
    "views.pt": views,
    "parameters.pt": parameters,
    "quantized.pt": quantized,
    "user_objects.pt": user_objects,
    "module.pt": _model,
}


def write_plain_corpus(directory: Path) -> dict[str, Path]:
    written: dict[str, Path] = {}
    for name, build in PLAIN_CORPUS.items():
        written[name] = directory / name
        torch.save(build(), written[name])
    for protocol in (2, 3, 4, 5):
        name = f"protocol{protocol}.pt"
        written[name] = directory / name
        torch.save(training_state(), written[name], pickle_protocol=protocol)
    with (directory / "buffer.pt").open("wb") as handle:  # a file object: archive root "archive/"
        torch.save(all_dtypes(), handle)
    written["buffer.pt"] = directory / "buffer.pt"
    written["my.model.ckpt"] = directory / "my.model.ckpt"
    torch.save({"w": torch.ones(3)}, written["my.model.ckpt"])
    return written


def rewrite_archive(
    source: Path,
    target: Path,
    *,
    replace: dict[str, bytes] | None = None,
    drop: tuple[str, ...] = (),
    compress: tuple[str, ...] = (),
) -> Path:
    """Copy a torch zip record by record through `zipfile`, changing the named records (names are
    relative to the archive root)."""
    replace = replace or {}
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as copy:
        root = original.namelist()[0].split("/", 1)[0]
        for info in original.infolist():
            name = info.filename[len(root) + 1 :]
            if name in drop:
                continue
            data = replace.get(name, original.read(info))
            method = zipfile.ZIP_DEFLATED if name in compress else zipfile.ZIP_STORED
            copy.writestr(info.filename, data, compress_type=method)
    return target


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's bytes, row-major, as torch holds them in memory (quantized: the integer values)."""
    if tensor.is_quantized:
        tensor = tensor.int_repr()
    if tensor.is_conj():
        tensor = tensor.conj()  # undo the lazy conjugation: the file stores the plain values
    flat = tensor.detach().reshape(-1)
    packed = torch.empty(flat.shape, dtype=flat.dtype).copy_(flat)  # stride 1 even for one element
    return packed.view(torch.uint8).numpy().tobytes() if packed.numel() else b""
