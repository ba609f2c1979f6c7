"""Checkpoints written once per session by the real libraries, with manifests, and the stores they
are copied to: fsspec's in-memory filesystem (through a subclass that counts the bytes fetched) and
a real S3 API server (moto) on 127.0.0.1."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

fsspec = pytest.importorskip("fsspec")
torch = pytest.importorskip("torch")

from fsspec.implementations.memory import MemoryFileSystem  # noqa: E402

from ckptspec import load_spec  # noqa: E402
from ckptspec.adopt import adopt  # noqa: E402
from ckptspec.cli import cli  # noqa: E402

BUCKET = "checkpoints"

LIGHTNING_SPEC = """\
ckptspec: "1.0"
kind: spec
name: remote-lightning
framework: lightning
components:
  config: {require: optional}
  scheduler: {require: required}
  rng: {require: optional}
  fingerprint: {require: optional}
"""


class CountingMemoryFileSystem(MemoryFileSystem):
    """fsspec's memory filesystem under its own protocol, counting every byte `cat_file` returns:
    the only way ckptspec fetches remote bytes."""

    protocol = ("countingmemory",)
    fetched = 0
    requests = 0

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        return str(super()._strip_protocol(path.removeprefix("countingmemory://")))

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        data = super().cat_file(path, start=start, end=end, **kwargs)
        type(self).fetched += len(data)
        type(self).requests += 1
        return data


fsspec.register_implementation("countingmemory", CountingMemoryFileSystem, clobber=True)


def run_cli(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(arg) for arg in args])
    return result.exit_code, result.stdout, result.stderr


def upload(files: list[Path], url: str, base: Path | None = None) -> str:
    """Copy `files` under the prefix `url`, named as they are relative to `base` (the first one's
    directory by default); returns the prefix."""
    fs, prefix = fsspec.core.url_to_fs(url)
    base = base or files[0].parent
    for file in files:
        fs.pipe_file(f"{prefix}/{file.relative_to(base).as_posix()}", file.read_bytes())
    fs.invalidate_cache()
    return url


@dataclass(frozen=True)
class Written:
    """One checkpoint as its library wrote it: the path validate takes, and every file of it."""

    path: Path
    files: list[Path]

    def upload(self, url: str) -> str:
        return upload(self.files, url, self.path.parent)

    def copy_to(self, directory: Path) -> None:
        for file in self.files:
            target = directory / file.relative_to(self.path.parent)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)


def _with_manifest(path: Path, *files: Path) -> Written:
    return Written(path, [*files, Path(f"{path}.ckptspec.yaml")])


@pytest.fixture(scope="session")
def lightning_spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "lightning.yaml"
    path.write_text(LIGHTNING_SPEC)
    return path


def _fit(directory: Path, buffer_elements: int = 0) -> Path:
    from ..validator._lightning_training import TinyRegressor, fit

    class WithBuffer(TinyRegressor):
        """Carries a large buffer, saved in its state dict: a checkpoint of tens of megabytes."""

        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("table", torch.arange(buffer_elements, dtype=torch.float32))

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not buffer_elements:
            return fit(directory)
        import pytorch_lightning as pl
        from torch.utils.data import DataLoader, TensorDataset

        torch.manual_seed(0)
        trainer = pl.Trainer(
            max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
            enable_model_summary=False, default_root_dir=directory,
        )  # fmt: skip
        trainer.fit(WithBuffer(), DataLoader(TensorDataset(torch.randn(8, 3), torch.randn(8, 1)), batch_size=4))
        (checkpoint,) = (directory / "checkpoints").glob("*.ckpt")
        return checkpoint


@pytest.fixture(scope="session")
def written(tmp_path_factory: pytest.TempPathFactory, lightning_spec: Path) -> dict[str, Written]:
    """Real checkpoints of each kind, each in its own directory with its adopted manifest."""
    checkpoints: dict[str, Written] = {}
    lightning = _fit(tmp_path_factory.mktemp("lightning"))
    adopt(lightning, load_spec(lightning_spec))
    checkpoints["lightning"] = _with_manifest(lightning, lightning)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 1}
    plain = tmp_path_factory.mktemp("torch") / "model.pt"
    torch.save(state, plain)
    adopt(plain)
    checkpoints["torch"] = _with_manifest(plain, plain)

    legacy = tmp_path_factory.mktemp("legacy") / "legacy.pt"
    torch.save(state, legacy, _use_new_zipfile_serialization=False)
    adopt(legacy)
    checkpoints["legacy"] = _with_manifest(legacy, legacy)

    checkpoints["safetensors"] = _safetensors(tmp_path_factory.mktemp("safetensors"), model)
    checkpoints["safetensors-sharded"] = _sharded_safetensors(tmp_path_factory.mktemp("sharded"), model)
    checkpoints["tf"] = _tf_bundle(tmp_path_factory.mktemp("tf"))
    checkpoints["keras"], checkpoints["keras-weights"] = _keras_files(tmp_path_factory.mktemp("keras"))
    checkpoints["dcp"] = _dcp(tmp_path_factory.mktemp("dcp"), state)
    checkpoints["torch-exported"] = _exported(tmp_path_factory.mktemp("exported"), model, optimizer)
    return checkpoints


def _exported(directory: Path, model: Any, optimizer: Any) -> Written:
    """`ckptspec.torch.save` with the fixed batch and the program `torch.export` makes of the model (`.pt2`)."""
    from ckptspec.torch import save

    path = directory / "exported.pt"
    save(path, model=model, optimizer=optimizer, fingerprint_batch=torch.ones(2, 3), export_program=True)
    return Written(path, [path, Path(f"{path}.ckptspec.yaml"), Path(f"{path}.pt2")])


def _keras_files(directory: Path) -> tuple[Written, Written]:
    """A `.keras` archive and a `.weights.h5` file (HDF5), as Keras 3 writes them."""
    tf = pytest.importorskip("tensorflow")
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4), tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(tf.random.normal((8, 3)), tf.random.normal((8, 1)), epochs=1, verbose=0)
    archive, weights = directory / "model.keras", directory / "model.weights.h5"
    model.save(archive)
    model.save_weights(weights)
    adopt(archive)
    adopt(weights)
    return _with_manifest(archive, archive), _with_manifest(weights, weights)


def _dcp(directory: Path, state: dict[str, Any]) -> Written:
    """A torch.distributed.checkpoint save of one process: `.metadata` and a `.distcp` data file."""
    import torch.distributed.checkpoint as dcp

    save_directory = directory / "step-1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": state["model"]}, checkpoint_id=save_directory)
    adopt(save_directory)
    return Written(save_directory, [*sorted(save_directory.iterdir()), Path(f"{save_directory}.ckptspec.yaml")])


def _safetensors(directory: Path, model: Any) -> Written:
    from safetensors.torch import save_file

    path = directory / "model.safetensors"
    save_file({name: tensor.contiguous() for name, tensor in model.state_dict().items()}, path)
    adopt(path)
    return _with_manifest(path, path)


def _sharded_safetensors(directory: Path, model: Any) -> Written:
    from safetensors.torch import save_file

    tensors = model.state_dict()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[:2], "model-00002-of-00002.safetensors": names[2:]}
    for shard, members in shards.items():
        save_file({name: tensors[name].contiguous() for name in members}, directory / shard)
    index = directory / "model.safetensors.index.json"
    weight_map = {name: shard for shard, members in shards.items() for name in members}
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    adopt(index)
    return _with_manifest(index, index, *(directory / shard for shard in shards))


def _tf_bundle(directory: Path) -> Written:
    tf = pytest.importorskip("tensorflow")
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam(0.01)
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(tf.random.normal((8, 3)), tf.random.normal((8, 1)), epochs=1, verbose=0)
    prefix = Path(tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(directory / "ckpt")))
    adopt(prefix)
    files = sorted(path for path in directory.iterdir() if path.name.startswith(prefix.name) or path.name == "checkpoint")
    return Written(prefix, files)


@pytest.fixture(scope="session")
def large_lightning(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real Lightning checkpoint of about 50 MB (a 12.5 M-element buffer), with its manifest."""
    checkpoint = _fit(tmp_path_factory.mktemp("large"), buffer_elements=12_500_000)
    adopt(checkpoint)
    return checkpoint


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def s3() -> Iterator[str]:
    """A moto S3 API server on 127.0.0.1 with one bucket; fsspec's `s3://` goes to it."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    saved_environment = {key: os.environ.get(key) for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    saved_config = fsspec.config.conf.get("s3")
    fsspec.config.conf["s3"] = {"endpoint_url": endpoint}
    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir(BUCKET)
    yield f"s3://{BUCKET}"
    server.stop()
    if saved_config is None:
        fsspec.config.conf.pop("s3", None)
    else:
        fsspec.config.conf["s3"] = saved_config
    for key, value in saved_environment.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
