"""Real files for the torch-side format readers, written by torch, safetensors and torch.jit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch


def tensors_across_dtypes() -> dict[str, torch.Tensor]:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    return {
        "float32": base,
        "float64": torch.randn(2, 3, dtype=torch.float64),
        "float16": torch.randn(5, dtype=torch.float16),
        "bfloat16": torch.randn(2, 2, dtype=torch.bfloat16),
        "int64": torch.arange(7),
        "int32": torch.arange(3, dtype=torch.int32),
        "int8": torch.tensor([-1, 2], dtype=torch.int8),
        "uint8": torch.tensor([250, 3], dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "complex64": torch.randn(2, dtype=torch.complex64),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
    }


def _views() -> dict[str, Any]:
    shared = torch.arange(30, dtype=torch.float32).reshape(5, 6)
    return {
        "whole": shared,
        "row": shared[2],
        "transposed": shared.t(),
        "strided": shared[:, ::2],
        "tail": shared.flatten()[7:19],
        "nested": {"list": [shared[1:3, 2:], torch.ones(2)], "tuple": (torch.zeros(3),)},
        "parameter": torch.nn.Parameter(torch.randn(3, 2)),
    }


def lightning_style() -> dict[str, Any]:
    """The keys Lightning's `dump_checkpoint` writes, with a real model and optimizer state."""
    import pytorch_lightning

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return {
        "epoch": 1,
        "global_step": 1,
        "pytorch-lightning_version": pytorch_lightning.__version__,
        "state_dict": model.state_dict(),
        "loops": {"fit_loop": {"state_dict": {}}},
        "optimizer_states": [optimizer.state_dict()],
        "lr_schedulers": [scheduler.state_dict()],
        "hyper_parameters": {"lr": 0.01, "hidden": 3},
    }


def model_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return model.state_dict()


def write_legacy_corpus(directory: Path) -> dict[str, Path]:
    contents = {"dtypes.pt": tensors_across_dtypes(), "views.pt": _views(), "lightning.ckpt": lightning_style(),
                "model.pth": model_state()}  # fmt: skip
    paths = {}
    for name, value in contents.items():
        paths[name] = directory / name
        torch.save(value, paths[name], _use_new_zipfile_serialization=False)
    return paths


def write_safetensors_corpus(directory: Path) -> dict[str, Path]:
    from safetensors.torch import save_file

    single = directory / "model.safetensors"
    save_file({k: v for k, v in tensors_across_dtypes().items() if k != "complex64"}, single, metadata={"format": "pt", "step": "7"})
    state = {k: v.contiguous() for k, v in model_state().items()}
    names = list(state)
    shard_names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    halves = [names[: len(names) // 2], names[len(names) // 2 :]]
    sharded = directory / "sharded"
    sharded.mkdir()
    for shard, members in zip(shard_names, halves):
        save_file({name: state[name] for name in members}, sharded / shard, metadata={"format": "pt"})
    index = {
        "metadata": {"total_size": sum(t.numel() * t.element_size() for t in state.values())},
        "weight_map": {name: shard for shard, members in zip(shard_names, halves) for name in members},
    }
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    return {"model.safetensors": single, "index": sharded / "model.safetensors.index.json"}


class ScriptedNet(torch.nn.Module):
    """A module with parameters, buffers, a BatchNorm and a tensor constant in its code."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 8)
        self.norm = torch.nn.BatchNorm1d(8)
        self.head = torch.nn.Linear(8, 2)
        self.register_buffer("scale", torch.arange(2, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.norm(self.linear(x)))) * self.scale.float() + torch.ones(2) * 3


def write_torchscript_corpus(directory: Path) -> dict[str, Path]:
    torch.manual_seed(2)
    model = ScriptedNet().eval()
    paths = {"scripted.pt": directory / "scripted.pt", "traced.pt": directory / "traced.pt"}
    torch.jit.save(torch.jit.script(model), paths["scripted.pt"])
    torch.jit.save(torch.jit.trace(model, torch.randn(4, 16)), paths["traced.pt"])
    paths["state_dict.pth"] = directory / "state_dict.pth"
    torch.save(model.state_dict(), paths["state_dict.pth"])
    return paths
