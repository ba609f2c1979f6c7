"""Real multi-rank saves: each function runs in every process `torch.multiprocessing.spawn` starts
(gloo on CPU), so the directories are written by torch.distributed.checkpoint itself."""

from __future__ import annotations

import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Shard, distribute_tensor
from lightning_fabric.strategies.fsdp import _distributed_checkpoint_save

WIDTH = 64
"""Hidden width: big enough that each parameter is split across every rank."""

CRC32C_SPEC = """\
ckptspec: "1.0"
kind: spec
name: sharded-crc32c
framework: torch
components:
  config: {require: optional}
  optimizer: {require: optional}
  scheduler: {require: optional}
  data_position: {require: optional}
  fingerprint: {require: optional}
integrity: {file_digest: crc32c}
"""
"""Hidden width: big enough that each parameter is split across every rank."""


def _join(rank: int, world: int, store: Path) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, 4))


def save_fully_sharded(rank: int, world: int, directory: str, store: str) -> None:
    """FSDP2 (`fully_shard`) on a CPU mesh, one AdamW step, saved with `dcp.save`: DTensor shards."""
    _join(rank, world, Path(store))
    try:
        init_device_mesh("cpu", (world,))
        net = model()
        fully_shard(net)
        optimizer = torch.optim.AdamW(net.parameters(), lr=1e-3)
        torch.manual_seed(1)
        net(torch.randn(16, 8)).square().mean().backward()
        optimizer.step()
        dcp.save({"model": net.state_dict(), "optim": optimizer.state_dict(), "epoch": 3}, checkpoint_id=directory)
        # What pytorch_lightning's FSDPStrategy.save_checkpoint does with the sharded state, through
        # its own function; rank 0's `meta.pt` (the rest of the Trainer's checkpoint) is added by the test.
        converted = {"model": net.state_dict(), "optimizer_0": optimizer.state_dict()}
        _distributed_checkpoint_save(converted, Path(f"{directory}-lightning"))
        _adapter_round_trip(rank, f"{directory}-adapter")
        _async_round_trip(rank, f"{directory}-async")
    finally:
        dist.destroy_process_group()


def save_row_sharded(rank: int, world: int, directory: str, store: str) -> None:
    """Plain tensors sharded by rows with `distribute_tensor(Shard(0))`, and per-rank metadata
    (`use_collectives=False`) beside one collective save, for the two metadata forms."""
    _join(rank, world, Path(store))
    try:
        mesh = init_device_mesh("cpu", (world,))
        torch.manual_seed(2)
        state = {
            "model": {
                "embedding": distribute_tensor(torch.randn(world * 16, 32), mesh, [Shard(0)]),
                "head": distribute_tensor(torch.randn(32, world * 8), mesh, [Shard(1)]),
                "scale": torch.tensor(0.5),
            }
        }
        dcp.save(state, checkpoint_id=directory)
        dcp.save(state, checkpoint_id=f"{directory}-per-rank", use_collectives=False)
    finally:
        dist.destroy_process_group()


def _write_key_pair(private: Path) -> None:
    """An elliptic-curve key pair: `private` and `private.pub`."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    Path(f"{private}.pub").write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def _adapter_round_trip(rank: int, directory: str) -> None:
    """`ckptspec.torch.save_sharded` then `restore_sharded` on every rank; each rank writes what it
    drew after saving and after restoring, and what a one-rank restore of the save did."""
    import json
    import random

    import ckptspec.torch as ckpt
    from ckptspec import AdapterError, RestoreError
    from ckptspec.cli.documents import starter_spec

    net = model()
    fully_shard(net)
    random.seed(100 + rank)
    torch.manual_seed(100 + rank)
    ckpt.save_sharded(directory, {"model": net.state_dict()})
    spec = Path(f"{directory}.rank{rank}.spec.yaml")
    spec.write_text(CRC32C_SPEC)
    key = Path(f"{directory}-crc32c.key")
    if rank == 0:  # rank 0 writes the manifest, and signs the directory with it
        _write_key_pair(key)
    ckpt.save_sharded(f"{directory}-crc32c", {"model": net.state_dict()}, spec=spec, signing_key=key if rank == 0 else None)
    starter = Path(f"{directory}.rank{rank}.starter.yaml")
    starter.write_text(starter_spec("starter", "torch"))
    try:
        ckpt.save_sharded(f"{directory}-starter", {"model": net.state_dict()}, spec=starter)
        starter_refusal = ""
    except AdapterError as error:
        starter_refusal = str(error)
    drawn_after_save = [random.random(), torch.rand(3).tolist()]
    random.seed(0)
    torch.manual_seed(0)  # every rank now draws the same numbers, as after a naive restore
    fresh = model()
    torch.nn.init.zeros_(fresh[0].weight)
    fully_shard(fresh)
    state = {"model": fresh.state_dict()}
    report = ckpt.restore_sharded(directory, state)
    drawn_after_restore = [random.random(), torch.rand(3).tolist()]
    restored_weight = fresh[0].weight.full_tensor().sum().item()
    saved_weight = net[0].weight.full_tensor().sum().item()
    alone = dist.new_group([0])
    refused, resharded = "", None
    if rank == 0:
        try:
            ckpt.restore_sharded(directory, {"model": {"0.weight": torch.zeros(WIDTH, 8)}}, process_group=alone)
        except RestoreError as error:
            refused = str(error)
        whole = {"model": {"0.weight": torch.zeros(WIDTH, 8)}}
        report_alone = ckpt.restore_sharded(directory, whole, allow_resharding=True, process_group=alone)
        resharded = [report_alone.rng_restored, whole["model"]["0.weight"].sum().item()]
    result = {
        "after_save": drawn_after_save,
        "after_restore": drawn_after_restore,
        "report": [report.saved_world_size, report.world_size, report.rng_restored],
        "weights": [saved_weight, restored_weight],
        "refused": refused,
        "resharded": resharded,
        "starter_refusal": starter_refusal,
    }
    Path(f"{directory}.rank{rank}.json").write_text(json.dumps(result))


def save_hf_storage(rank: int, world: int, directory: str, store: str) -> None:
    """DTensors sharded by rows and by columns, saved with DCP's Hugging Face storage writer: each
    rank its own safetensors files (`directory`), and again with the consolidation torch offers
    (`-consolidated`: the shards under `sharded/`, one Hugging Face checkpoint of two files beside it)."""
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    _join(rank, world, Path(store))
    try:
        mesh = init_device_mesh("cpu", (world,))
        torch.manual_seed(3)
        state = {
            "embedding": distribute_tensor(torch.randn(world * 16, 32), mesh, [Shard(0)]),
            "head": distribute_tensor(torch.randn(32, world * 8), mesh, [Shard(1)]),
            "scale": torch.tensor(0.5),
        }
        dcp.save(state, storage_writer=HuggingFaceStorageWriter(directory, save_distributed=True))
        consolidated = HuggingFaceStorageWriter(
            f"{directory}-consolidated", save_distributed=True, enable_consolidation=True,
            fqn_to_index_mapping={"embedding": 1, "head": 2, "scale": 2},
        )  # fmt: skip
        dcp.save(state, storage_writer=consolidated)
    finally:
        dist.destroy_process_group()
@contextmanager
def _writes_fail(failing: bool) -> Iterator[None]:
    """In the block, this process cannot grow a file past a few bytes (`RLIMIT_FSIZE`: a write
    past it fails with EFBIG), when `failing`."""
    if not failing:
        yield
        return
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, limits[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)


def _async_round_trip(rank: int, directory: str) -> None:
    """`ckptspec.torch.async_save_sharded`: a save that finishes, then restored on every rank; a
    save that fails on rank 1 (a directory stands where its data file goes) into a fresh directory,
    and one over a finished save. Each rank writes what it saw."""
    import json
    import random

    import ckptspec.torch as ckpt

    net = model()
    fully_shard(net)
    random.seed(200 + rank)
    torch.manual_seed(200 + rank)
    manifest = ckpt.async_save_sharded(directory, {"model": net.state_dict()}).result()
    marked_when_resolved = manifest.is_file()
    drawn_after_save = [random.random(), torch.rand(3).tolist()]
    random.seed(0)
    torch.manual_seed(0)
    fresh = model()
    torch.nn.init.zeros_(fresh[0].weight)
    fully_shard(fresh)
    report = ckpt.restore_sharded(directory, {"model": fresh.state_dict()})
    drawn_after_restore = [random.random(), torch.rand(3).tolist()]
    weights = [net[0].weight.full_tensor().sum().item(), fresh[0].weight.full_tensor().sum().item()]

    ckpt.async_save_sharded(f"{directory}-overwritten", {"model": net.state_dict()}).result()
    errors = {}
    for target in (f"{directory}-failed", f"{directory}-overwritten"):
        dist.barrier()
        with _writes_fail(rank == 1):  # rank 1 cannot write its data file
            error = ckpt.async_save_sharded(target, {"model": fresh.state_dict()}).exception()
        errors[target] = f"{type(error).__name__}: {error}" if error is not None else ""
        dist.barrier()
    result = {
        "manifest": str(manifest),
        "marked_when_resolved": marked_when_resolved,
        "after_save": drawn_after_save,
        "after_restore": drawn_after_restore,
        "report": [report.saved_world_size, report.world_size, report.rng_restored],
        "weights": weights,
        "errors": errors,
    }
    Path(f"{directory}.rank{rank}.json").write_text(json.dumps(result))
