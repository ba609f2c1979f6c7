"""Verifying a ~2 GiB torch.distributed.checkpoint directory written by 4 ranks, against a bare
read + CRC32C loop over the same files.

Each mode is meant to be timed as a whole process, for example with `/usr/bin/time -v`:

    python bench/dcp_verify.py prepare      # 4 spawned ranks (gloo) save 2 GiB of row-sharded DTensors
    python bench/dcp_verify.py bare         # read every .distcp file in 16 MiB pieces, CRC32C each
    python bench/dcp_verify.py reader       # open the view: metadata, structure, every slice's zip CRC-32
    python bench/dcp_verify.py tensors      # every tensor's CRC32C over its chunks (what a manifest checks)

`ckptspec manifest DIR` then `ckptspec validate DIR` gives the whole command (it also hashes each
file with SHA-256 for the manifest's `files:`).

With `--layout hf` the ranks save through DCP's `HuggingFaceStorageWriter(save_distributed=True)`
instead: one safetensors file per rank, read by the same modes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

DEFAULT_DIRECTORY = Path(tempfile.gettempdir()) / "ckptspec-dcp-bench" / "ckpt"
RANKS = 4
TENSORS = 16
ROWS, COLUMNS = 8192, 4096  # float32: 128 MiB per tensor, 2 GiB in all
PIECE = 16 << 20


def _save_rank(rank: int, directory: str, store: str, layout: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=RANKS)
    try:
        mesh = init_device_mesh("cpu", (RANKS,))
        generator = torch.Generator().manual_seed(rank)
        state = {
            f"layer{index}.weight": DTensor.from_local(
                torch.rand(ROWS // RANKS, COLUMNS, generator=generator), mesh, [Shard(0)], run_check=False
            )
            for index in range(TENSORS)
        }
        if layout == "hf":
            from torch.distributed.checkpoint import HuggingFaceStorageWriter

            dcp.save(state, storage_writer=HuggingFaceStorageWriter(directory, save_distributed=True))
        else:
            dcp.save({"model": state}, checkpoint_id=directory)
    finally:
        dist.destroy_process_group()


def prepare(directory: Path, layout: str) -> None:
    import torch.multiprocessing as mp

    directory.parent.mkdir(parents=True, exist_ok=True)
    mp.spawn(_save_rank, args=(str(directory), str(directory.parent / f"store-{layout}"), layout), nprocs=RANKS, join=True)


def bare(directory: Path, layout: str) -> None:
    import crc32c

    total = 0
    for file in sorted(directory.glob("*.safetensors" if layout == "hf" else "*.distcp")):
        value = 0
        with file.open("rb", buffering=0) as handle:
            while piece := handle.read(PIECE):
                value = crc32c.crc32c(piece, value)
                total += len(piece)
        print(f"{file.name} {value:08x}")
    print(f"{total} bytes")


def reader(directory: Path, layout: str) -> None:
    from ckptspec._views.open import open_view

    with open_view(directory) as view:
        print(f"{len(view.tensors)} tensors, {len(view.problems)} problems")


def tensors(directory: Path, layout: str) -> None:
    from ckptspec._views.open import open_view

    with open_view(directory, trusted_tensors=_all_pointers(directory, layout)) as view:
        for pointer, tensor in view.tensors.items():
            print(pointer, tensor.crc32c())


def _all_pointers(directory: Path, layout: str) -> set[str]:
    from ckptspec._pointer import join_pointer
    from ckptspec.formats.dcp import open_dcp_directory
    from ckptspec.formats.hf_storage import open_hf_storage

    opened = open_hf_storage(directory) if layout == "hf" else open_dcp_directory(directory)
    return {join_pointer(tensor.path) for tensor in opened.tensors}


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["prepare", "bare", "reader", "tensors"])
    parser.add_argument("directory", nargs="?", type=Path)
    parser.add_argument("--layout", choices=["dcp", "hf"], default="dcp")
    options = parser.parse_args(arguments)
    directory = options.directory or DEFAULT_DIRECTORY.with_name(f"ckpt-{options.layout}" if options.layout == "hf" else "ckpt")
    {"prepare": prepare, "bare": bare, "reader": reader, "tensors": tensors}[options.mode](directory, options.layout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
