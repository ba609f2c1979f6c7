"""Benchmark: `ckptspec audit --jobs N` over a registry of 50 mixed checkpoints.

    python bench/audit.py build DIR          # write the registry once (needs torch and tensorflow)
    ckptspec audit DIR --jobs 1 --format json --output /dev/null
    ckptspec audit DIR --jobs 2 --format json --output /dev/null

The registry holds 40 `torch.save` files (`.pt` and `.ckpt`) of a ~2 MiB model with its Adam state
(~6 MiB each) and 10 TensorFlow bundles of a ~1 MiB Keras model with its Adam slots (~3 MiB each),
each with a manifest adopted against a spec. Time both audit commands as whole processes
(e.g. `/usr/bin/time -v`, median of several runs); docs/benchmarks.md records the figures.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["build"]

TORCH_CHECKPOINTS = 40
TF_CHECKPOINTS = 10
SPEC = """\
ckptspec: "1.0"
kind: spec
name: bench
components:
  config: {require: optional}
  scheduler: {require: optional}
  rng: {require: optional}
  data_position: {require: optional}
  fingerprint: {require: optional}
"""
_TF_SCRIPT = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
model = tf.keras.Sequential([tf.keras.Input((256,)), tf.keras.layers.Dense(512), tf.keras.layers.Dense(256)])
optimizer = tf.keras.optimizers.Adam()
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(model(tf.ones((2, 256))))
optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
for index in range(int(sys.argv[2])):
    checkpoint.write(os.path.join(sys.argv[1], f"tf-{index:02d}", "ckpt"))
"""


def _write_torch(directory: Path) -> list[Path]:
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(2, 512)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    paths = []
    for index in range(TORCH_CHECKPOINTS):
        path = directory / f"torch-{index:02d}" / ("model.ckpt" if index % 2 else "model.pt")
        path.parent.mkdir(parents=True)
        torch.save(state, path)
        paths.append(path)
    return paths


def build(directory: Path) -> None:
    from ckptspec import load_spec
    from ckptspec.adopt import adopt

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "spec.yaml").write_text(SPEC)
    spec = load_spec(directory / "spec.yaml")
    checkpoints = _write_torch(directory)
    subprocess.run([sys.executable, "-c", _TF_SCRIPT, str(directory), str(TF_CHECKPOINTS)], check=True)
    checkpoints += [index.with_suffix("") for index in sorted(directory.glob("tf-*/ckpt.index"))]
    for checkpoint in checkpoints:
        adopt(checkpoint, spec)
    print(f"wrote {len(checkpoints)} checkpoints with manifests under {directory}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "build":
        raise SystemExit(__doc__)
    build(Path(sys.argv[2]))
