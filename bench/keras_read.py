"""Reading ~1 GiB and ~4 GiB Keras files: ckptspec against Keras' and h5py's own reads.

Each mode is meant to run as its own process; it prints its wall time (the libraries it needs are
imported first and timed apart), and the process's peak resident memory, so modes compare side by side:

    python bench/keras_read.py prepare                 # bench-1gib.keras and .weights.h5 by Keras, bench-4gib.weights.h5 by h5py
    python bench/keras_read.py inspect 1gib.keras      # ckptspec: structure only
    python bench/keras_read.py load_model 1gib.keras   # keras.models.load_model
    python bench/keras_read.py h5py 1gib.weights.h5    # h5py: read every dataset in full
    python bench/keras_read.py verify 4gib.weights.h5  # ckptspec: CRC32C of every tensor's stored bytes
    python bench/keras_read.py crc 4gib.weights.h5     # bare read + CRC32C loop over the same file

The 4 GiB file is written by h5py in Keras' layout (`layers/<name>/vars/<i>`, contiguous datasets),
because building a 4 GiB Keras model needs several times that memory.
"""

from __future__ import annotations

import argparse
import importlib
import resource
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_DIRECTORY = Path(tempfile.gettempdir()) / "ckptspec-keras-bench"
WIDTH = 4096  # a Dense(4096) over 4096 inputs: 64 MiB of float32 kernel
CHUNK = 16 << 20


def prepare(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "bench-1gib.keras").exists():
        import keras

        layers = [keras.Input((WIDTH,)), *(keras.layers.Dense(WIDTH) for _ in range(16))]
        model = keras.Sequential(layers)
        model.save(directory / "bench-1gib.keras")
        model.save_weights(directory / "bench-1gib.weights.h5")
    if not (directory / "bench-4gib.weights.h5").exists():
        _write_h5py(directory / "bench-4gib.weights.h5", layers=64)


def _write_h5py(path: Path, layers: int) -> None:
    import h5py
    import numpy as np

    block = np.full((WIDTH // 16, WIDTH), 0.5, dtype=np.float32)
    with h5py.File(path, "w") as handle:
        for index in range(layers):
            kernel = handle.create_dataset(f"layers/dense_{index}/vars/0", shape=(WIDTH, WIDTH), dtype="f4")
            for row in range(0, WIDTH, block.shape[0]):
                kernel[row : row + block.shape[0]] = block
            handle[f"layers/dense_{index}/vars/1"] = np.zeros(WIDTH, dtype=np.float32)


def run_inspect(path: Path) -> None:
    from ckptspec.formats.inspect import inspect_checkpoint

    inspection = inspect_checkpoint(path)
    print(f"{len(inspection.tensors)} tensors")


def run_load_model(path: Path) -> None:
    import keras

    model = keras.models.load_model(path)
    print(f"{len(model.weights)} weights")


def run_h5py(path: Path) -> None:
    import h5py

    total = 0

    def read(name: str, obj: object) -> None:
        nonlocal total
        if isinstance(obj, h5py.Dataset):
            total += obj[()].nbytes

    with h5py.File(path, "r") as handle:
        handle.visititems(read)
    print(f"{total / 2**30:.2f} GiB read")


def run_verify(path: Path) -> None:
    """What `validate` does to the tensors of a file whose manifest records every CRC32C."""
    from ckptspec.formats.keras import open_keras

    with open_keras(path) as keras_file:
        for tensor in keras_file.tensors.values():
            keras_file.crc32c(tensor)
        print(f"{len(keras_file.tensors)} tensors checksummed")


def run_crc(path: Path) -> None:
    import crc32c

    buffer = bytearray(CHUNK)
    value = 0
    with path.open("rb") as handle:
        while count := handle.readinto(buffer):
            value = crc32c.crc32c(memoryview(buffer)[:count], value)
    print(f"crc32c {value:08x}")


MODES = {"inspect": run_inspect, "load_model": run_load_model, "h5py": run_h5py, "verify": run_verify, "crc": run_crc}
IMPORTS = {
    "inspect": ("h5py", "ckptspec.formats.detect", "ckptspec.formats.keras"),
    "load_model": ("keras",),
    "h5py": ("h5py",),
    "verify": ("h5py", "ckptspec.formats.keras"),
    "crc": ("crc32c",),
}
"""What each mode imports, timed apart: a library's start-up is paid once per process, not per file."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["prepare", *MODES])
    parser.add_argument("file", nargs="?", help="1gib.keras, 1gib.weights.h5 or 4gib.weights.h5")
    parser.add_argument("--directory", type=Path, default=DEFAULT_DIRECTORY)
    arguments = parser.parse_args()
    if arguments.mode == "prepare":
        prepare(arguments.directory)
        return
    path = arguments.directory / f"bench-{arguments.file}"
    start = time.perf_counter()
    for module in IMPORTS[arguments.mode]:
        importlib.import_module(module)
    imported = time.perf_counter()
    MODES[arguments.mode](path)
    elapsed = time.perf_counter() - imported
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{arguments.mode} {path.name}: {elapsed:.3f} s (+ {imported - start:.2f} s of imports), "
        f"peak RSS {peak:.0f} MiB ({path.stat().st_size / 2**30:.2f} GiB file)"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
