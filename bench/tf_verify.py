"""Full verification of a ~1 GiB TensorFlow bundle: ckptspec against TensorFlow's own reader.

Each mode is meant to be timed as a whole process, for example with `/usr/bin/time -v`:

    python bench/tf_verify.py prepare            # write the bundle once (needs tensorflow)
    python bench/tf_verify.py ckptspec           # verify_bundle: every index block and tensor CRC
    python bench/tf_verify.py tensorflow         # tf.train.load_checkpoint + get_tensor on every key
    python bench/tf_verify.py crc                # raw crc32c over the same bytes, already in memory

`get_tensor` checks each tensor's CRC32C as it reads it, so both sides do the same checking work.
The `ckptspec` and `crc` modes print bytes per second, so the two rates can be compared.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_DIRECTORY = Path(tempfile.gettempdir()) / "ckptspec-tf-bench"
TENSOR_COUNT = 64
TENSOR_ELEMENTS = 4 << 20  # float32: 16 MiB each, 1 GiB in all
CRC_BUFFER_BYTES = 256 << 20


def prefix_in(directory: Path) -> Path:
    return directory / "bench-1gib"


def prepare(directory: Path) -> Path:
    prefix = prefix_in(directory)
    if Path(f"{prefix}.index").exists():
        return prefix
    import tensorflow as tf

    model = tf.Module()
    model.layers = [tf.Variable(tf.fill([TENSOR_ELEMENTS], float(i) + 0.5)) for i in range(TENSOR_COUNT)]
    model.bias = tf.Variable(tf.zeros([1024]))
    tf.train.Checkpoint(model=model).write(str(prefix))
    return prefix


def bundle_bytes(prefix: Path) -> int:
    return sum(path.stat().st_size for path in prefix.parent.glob(f"{prefix.name}.data-*"))


def run_ckptspec(prefix: Path) -> None:
    from ckptspec.formats.tfbundle import verify_bundle

    start = time.perf_counter()
    problems = verify_bundle(prefix)
    elapsed = time.perf_counter() - start
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"ckptspec verify_bundle: {bundle_bytes(prefix) / elapsed / 1e9:.2f} GB/s, {len(problems)} problems")
    if problems:
        sys.exit(1)


def run_tensorflow(prefix: Path) -> None:
    import tensorflow as tf

    start = time.perf_counter()
    reader = tf.train.load_checkpoint(str(prefix))
    for key in reader.get_variable_to_shape_map():
        reader.get_tensor(key)
    elapsed = time.perf_counter() - start
    print(f"tensorflow get_tensor on every key: {bundle_bytes(prefix) / elapsed / 1e9:.2f} GB/s")


def run_crc(prefix: Path) -> None:
    import crc32c

    shard = next(prefix.parent.glob(f"{prefix.name}.data-*"))
    with shard.open("rb") as handle:
        data = handle.read(CRC_BUFFER_BYTES)
    total = bundle_bytes(prefix)
    start = time.perf_counter()
    done = 0
    while done < total:
        crc32c.crc32c(data[: total - done])
        done += len(data)
    elapsed = time.perf_counter() - start
    print(f"raw crc32c, one thread, bytes in memory: {total / elapsed / 1e9:.2f} GB/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["prepare", "ckptspec", "tensorflow", "crc"])
    parser.add_argument("--directory", type=Path, default=DEFAULT_DIRECTORY)
    arguments = parser.parse_args()
    arguments.directory.mkdir(parents=True, exist_ok=True)
    prefix = prepare(arguments.directory) if arguments.mode == "prepare" else prefix_in(arguments.directory)
    if not Path(f"{prefix}.index").exists():
        parser.error(f"{prefix}.index does not exist; run `python bench/tf_verify.py prepare` first")
    {
        "prepare": lambda p: print(f"{p}: {bundle_bytes(p)} bytes of tensor data"),
        "ckptspec": run_ckptspec,
        "tensorflow": run_tensorflow,
        "crc": run_crc,
    }[arguments.mode](prefix)


if __name__ == "__main__":
    main()
