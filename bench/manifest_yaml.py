"""Dump and load a manifest of N tensors (default 10,000); print the in-process time of each step.

    python bench/manifest_yaml.py [--tensors N] [--engine ckptspec|pyyaml]

`ckptspec` writes with `save_document` and reads with `load_manifest` (YAML plus schema
validation); `pyyaml` dumps and loads the same data with PyYAML's libyaml-backed safe dumper and
loader alone, as a baseline. Time both as whole processes (e.g. `/usr/bin/time -v`, median of
several runs) for the side-by-side figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

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


def round_trip_ckptspec(manifest: Manifest, path: Path) -> None:
    save_document(manifest, path)
    loaded = load_manifest(path)
    assert loaded == manifest


def round_trip_pyyaml(manifest: Manifest, path: Path) -> None:
    data = manifest.model_dump(mode="json", exclude_none=True)
    path.write_text(yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False, allow_unicode=True, width=100))
    assert yaml.load(path.read_text(), Loader=yaml.CSafeLoader) == data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=10_000)
    parser.add_argument("--engine", choices=["ckptspec", "pyyaml"], default="ckptspec")
    args = parser.parse_args()
    manifest = build(args.tensors)
    round_trip = round_trip_ckptspec if args.engine == "ckptspec" else round_trip_pyyaml
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "model.pt.ckptspec.yaml"
        started = time.perf_counter()
        round_trip(manifest, path)
        elapsed = time.perf_counter() - started
        size = path.stat().st_size
    print(f"{args.engine}: {args.tensors} tensors, {size} bytes of YAML, dump + load in {elapsed:.3f} s")


if __name__ == "__main__":
    main()
