"""Load and dump a manifest of N tensors (default 10,000) and print the time of each step.

    python bench/manifest_yaml.py [--tensors N] [--step dump|load|both]

Run it as a whole process under `/usr/bin/time -v` (or any benchmark harness) to see wall time and
peak memory; the printed figures are the in-process times of each step.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ckptspec import Manifest, load_manifest, save_document
from ckptspec._models import TensorEntry, TensorInventory


def build(count: int) -> Manifest:
    tensors = [
        TensorEntry(
            name=f"encoder.layers.{i // 8}.block.{i % 8}.weight",
            dtype="float32",
            shape=[256, 256],
            crc32c=f"{(i * 2654435761) & 0xFFFFFFFF:08x}",
            role="parameter",
        )
        for i in range(count)
    ]
    return Manifest(
        format="torch",
        checkpoint="model.pt",
        created="2026-11-29T00:00:00+00:00",
        producer={"ckptspec": "bench"},
        components={"model": TensorInventory(at="/model", tensors=tensors)},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=10_000)
    parser.add_argument("--step", choices=["dump", "load", "both"], default="both")
    args = parser.parse_args()
    manifest = build(args.tensors)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.pt.ckptspec.yaml"
        started = time.perf_counter()
        save_document(manifest, path)
        dumped = time.perf_counter()
        if args.step in ("load", "both"):
            loaded = load_manifest(path)
            assert loaded.components.model is not None and len(loaded.components.model.tensors) == args.tensors
        finished = time.perf_counter()
        size = path.stat().st_size
    print(f"tensors={args.tensors} yaml_bytes={size} dump_s={dumped - started:.3f} load_s={finished - dumped:.3f}")


if __name__ == "__main__":
    main()
