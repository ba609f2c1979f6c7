"""`validate` of a Lightning checkpoint in S3 (a moto server on 127.0.0.1) against the floor: a bare
loop of ranged reads over the same object through the same fsspec filesystem, computing its CRC32C.

    python bench/remote_s3.py DIR [--runs N]       # writes DIR/large.ckpt (~200 MB) once, then times

Both are timed in this process, alternating (validate, loop, validate, ...); medians are quoted.
`validate` reads the zip directory and pickle by small ranged requests, then every byte once for
the file's CRC32C and the tensors' CRC32Cs the manifest records. Also printed: the bytes and
requests each fetched, and `inspect`'s (structure only).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import crc32c

MiB = 1 << 20
CHUNK = 16 * MiB


def build(directory: Path) -> Path:
    """A real Lightning checkpoint of about 200 MB (a 50 M-element buffer), with its adopted manifest."""
    checkpoint = directory / "large.ckpt"
    if checkpoint.exists():
        return checkpoint
    import pytorch_lightning as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from ckptspec.adopt import adopt

    class Large(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)
            self.register_buffer("table", torch.arange(50_000_000, dtype=torch.float32))

        def training_step(self, batch: Any, _index: int) -> Any:
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self) -> Any:
            return torch.optim.Adam(self.parameters())

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir=directory, enable_checkpointing=False)  # fmt: skip
        trainer.fit(Large(), DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=4))
        trainer.save_checkpoint(checkpoint)
    adopt(checkpoint)
    return checkpoint


def start_s3() -> Any:
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    import fsspec

    fsspec.config.conf["s3"] = {"endpoint_url": f"http://127.0.0.1:{port}"}
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    return server


class Counted:
    """Counts the bytes and requests of an fsspec filesystem's `cat_file` (ckptspec's only remote read)."""

    def __init__(self, fs: Any) -> None:
        self.bytes = self.requests = 0
        original = fs.cat_file

        def counted(path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
            data = original(path, start=start, end=end, **kwargs)
            self.bytes += len(data)
            self.requests += 1
            return data

        fs.cat_file = counted


def bare_loop(fs: Any, key: str) -> str:
    size = fs.info(key)["size"]
    value = 0
    for start in range(0, size, CHUNK):
        value = crc32c.crc32c(fs.cat_file(key, start=start, end=min(start + CHUNK, size)), value)
    return f"{value:08x}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    args.directory.mkdir(parents=True, exist_ok=True)
    checkpoint = build(args.directory)
    server = start_s3()
    import fsspec

    from ckptspec._storage import location
    from ckptspec._validate import validate
    from ckptspec.formats import _source
    from ckptspec.formats.inspect import inspect_checkpoint

    fs = fsspec.filesystem("s3")
    fs.mkdir("bench")
    for file in (checkpoint, Path(f"{checkpoint}.ckptspec.yaml")):
        fs.put_file(str(file), f"bench/{file.name}")
    url = f"s3://bench/{checkpoint.name}"
    counter = Counted(location(url).fs)  # type: ignore[union-attr]
    size = checkpoint.stat().st_size
    print(f"object: {url}, {size / MiB:.1f} MiB")

    counter.bytes = counter.requests = 0
    inspect_checkpoint(url)
    print(f"inspect fetched {counter.bytes / MiB:.2f} MiB in {counter.requests} requests ({counter.bytes / size:.2%} of the object)")

    timings: dict[str, list[float]] = {"validate": [], "bare ranged reads + CRC32C": []}
    for _ in range(args.runs):
        counter.bytes = counter.requests = 0
        _source._WINDOWS = _source._WindowCache(capacity=32)  # cold: no window left from the run before
        started = time.perf_counter()
        result = validate(url)
        timings["validate"].append(time.perf_counter() - started)
        assert result.exit_code == 0, result.findings
        fetched = (counter.bytes, counter.requests)
        started = time.perf_counter()
        bare_loop(fs, f"bench/{checkpoint.name}")
        timings["bare ranged reads + CRC32C"].append(time.perf_counter() - started)
    print(f"validate fetched {fetched[0] / MiB:.1f} MiB in {fetched[1]} requests ({fetched[0] / size:.3f}× the object)")
    for name, values in timings.items():
        median = statistics.median(values)
        print(f"{name:28} median {median:.2f} s ({size / MiB / median:.0f} MiB/s); runs {' '.join(f'{v:.2f}' for v in values)}")
    server.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
