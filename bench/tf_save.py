"""Benchmark: a save through `ckptspec.tensorflow.CheckpointManager` against `tf.train.CheckpointManager`, same state, same disk.

    python bench/tf_save.py DIR [--runs N] [--mib 76]

Both managers save the same Keras model (4 dense layers, about `--mib` MiB of float32 weights,
an SGD optimizer) into directories of their own under DIR, keeping 3 bundles, so that from the
fourth save on each save also deletes the oldest bundle. ckptspec's save adds the commit of the
bundle with its manifest (the staged manifest, the lock, the state file replaced last; see
docs/crash-safety.md) and the CRC32C of every variable and file, with the starter spec (the
components a bare model lacks made optional). In process, A and B alternating, one save each per
pair after one warm-up save each; wall and CPU seconds (all threads) of the `save()` call alone.
Figures are median (min–max); ratios are taken pair by pair. Target ≤ 1.10.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

RELAXED = ("config", "optimizer", "rng", "data_position", "fingerprint")
"""Components the starter spec requires that a bare model and optimizer lack."""


def spread(values: Sequence[float], digits: int = 3) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def starter_spec(directory: Path):  # type: ignore[no-untyped-def]
    from ckptspec import load_spec

    path = directory / "spec.yaml"
    if not path.exists():
        subprocess.run([sys.executable, "-m", "ckptspec", "init", "-o", str(path)], check=True, stdout=subprocess.DEVNULL)
    spec = load_spec(path)
    relaxed = {name: getattr(spec.components, name).model_copy(update={"require": "optional"}) for name in RELAXED}
    return spec.model_copy(update={"components": spec.components.model_copy(update=relaxed)})


def model_of(mib: int):  # type: ignore[no-untyped-def]
    import keras

    width = int((mib * 2**20 / 4 / 4) ** 0.5)
    model = keras.Sequential([keras.Input((width,)), *(keras.layers.Dense(width) for _ in range(4))])
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def timed(save: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    save()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--mib", type=int, default=76)
    args = parser.parse_args()
    import tensorflow as tf

    import ckptspec.tensorflow

    args.directory.mkdir(parents=True, exist_ok=True)
    model, optimizer = model_of(args.mib)
    ours = ckptspec.tensorflow.CheckpointManager(
        args.directory / "ckptspec", model=model, optimizer=optimizer, global_generators=(), max_to_keep=3, spec=starter_spec(args.directory)
    )
    theirs = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=optimizer), args.directory / "tf", max_to_keep=3)
    saves = {"ckptspec": ours.save, "tf": theirs.save}
    for save in saves.values():
        save()  # warm-up: graphs traced, files created
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in saves}
    for _ in range(args.runs):
        for name, save in saves.items():
            times[name].append(timed(save))
    size = sum(variable.numpy().nbytes for variable in model.weights) / 2**20
    print(f"{size:.0f} MiB of variables, {args.runs} pairs, in process")
    print("| save | ckptspec.tensorflow.CheckpointManager | tf.train.CheckpointManager | A/B wall | A/B CPU |")
    print("| --- | --- | --- | --- | --- |")
    a, b = times["ckptspec"], times["tf"]
    print(
        f"| max_to_keep=3, from the second save on | {spread([w for w, _ in a])} s | {spread([w for w, _ in b])} s "
        f"| {spread([x[0] / y[0] for x, y in zip(a, b)], 2)} | {spread([x[1] / y[1] for x, y in zip(a, b)], 2)} |"
    )


if __name__ == "__main__":
    main()
