"""ckptspec end to end: train, checkpoint with manifests, validate, audit, and catch traps.

    python examples/demo.py OUTPUT_DIR

1. writes a spec (what every checkpoint of this project must hold);
2. trains a tiny Lightning model with `CkptspecCallback`: every checkpoint gets a manifest;
3. resumes it: checked against manifest and spec before training continues;
4. rebuilds the model with another BatchNorm eps and resumes: the trap is caught, naming the module;
5. trains a tiny Keras model with `ckptspec.tensorflow.CheckpointManager`;
6. validates every checkpoint with the static validator (no torch, no TensorFlow used there);
7. flips one byte of a tensor in a copy and shows the validator naming that tensor;
8. audits the whole directory into one SARIF report;
9. registers the Lightning checkpoints as a model version in an embedded MLflow registry (SQLite) and
   runs registry intake on it: the verdict is recorded as tags and the `validated` alias is set.

Exits 0 when every step behaves as described, 1 otherwise.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
warnings.filterwarnings("ignore")

import pytorch_lightning as pl  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import ckptspec  # noqa: E402
from ckptspec.formats.torchzip import open_torch_checkpoint  # noqa: E402
from ckptspec.lightning import CkptspecCallback  # noqa: E402

logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)  # after the import, which sets INFO

MARKER = ".ckptspec-demo"
FIXED_BATCH = torch.linspace(-2, 2, 32).reshape(8, 4)

SPEC = """\
ckptspec: "1.1"
kind: spec
name: demo-classifier
framework: lightning
components:
  optimizer: {type: Adam}
  scheduler: {require: required}
  rng: {generators: [python, numpy, torch]}
  data_position: {fields: [epoch, global_step, batch_in_epoch]}
  fingerprint: {atol: 0.0}
"""

TF_SPEC = """\
ckptspec: "1.1"
kind: spec
name: demo-regressor
framework: tensorflow
components:
  optimizer: {type: Adam}
  scheduler: {require: forbidden}
  rng: {generators: [tensorflow]}
  data_position: {fields: [global_step]}
"""


class Classifier(pl.LightningModule):
    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16, eps=eps), nn.ReLU(), nn.Linear(16, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_index: int) -> torch.Tensor:
        inputs, targets = batch
        return nn.functional.cross_entropy(self(inputs), targets)

    def configure_optimizers(self):  # type: ignore[no-untyped-def]
        optimizer = torch.optim.Adam(self.parameters(), lr=1e-2)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 10)}

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        generator = torch.Generator().manual_seed(0)
        inputs = torch.randn(256, 4, generator=generator)
        targets = (inputs.sum(dim=1) > 0).long() + (inputs[:, 0] > 1).long()
        dataset = torch.utils.data.TensorDataset(inputs, targets)
        return torch.utils.data.DataLoader(dataset, batch_size=32, shuffle=True)


def trainer(root: Path, max_epochs: int, *callbacks: pl.Callback) -> pl.Trainer:
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=root, save_top_k=-1, save_last="link")
    return pl.Trainer(
        default_root_dir=root,
        max_epochs=max_epochs,
        callbacks=[checkpoints, *callbacks],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        deterministic=True,
    )


def step(title: str) -> None:
    print(f"\n== {title}")


def train_lightning(root: Path, spec: Path) -> Path:
    step("Lightning: train 2 epochs with CkptspecCallback")
    pl.seed_everything(0, verbose=False)
    trainer(root, 2, CkptspecCallback(spec=spec, fingerprint_batch=FIXED_BATCH)).fit(Classifier())
    for path in sorted(root.iterdir()):
        print(f"  {path.name}")
    return root / "last.ckpt"


def resume_lightning(root: Path, spec: Path, last: Path) -> bool:
    step("Lightning: resume from last.ckpt (checked against manifest and spec first)")
    callback = CkptspecCallback(spec=spec, fingerprint_batch=FIXED_BATCH)
    trainer(root / "resumed", 3, callback).fit(Classifier(), ckpt_path=last)
    report = callback.last_report
    print(f"  resumed at epoch {report.data_position.get('epoch') if report and report.data_position else '?'}: "
          f"{report.tensors_loaded if report else '?'} tensors loaded, fingerprint replayed: "
          f"{report.fingerprint_replayed if report else '?'}")
    return report is not None and report.fingerprint_replayed


def catch_eps_trap(root: Path, spec: Path, last: Path) -> bool:
    step("Trap: the same checkpoint, model rebuilt with BatchNorm eps=1e-3 (plain Lightning resumes silently)")
    try:
        trainer(root / "trap", 3, CkptspecCallback(spec=spec, fingerprint_batch=FIXED_BATCH)).fit(
            Classifier(eps=1e-3), ckpt_path=last
        )
    except ckptspec.RestoreError as caught:
        print(f"  caught RestoreError: {caught}")
        return "eps" in str(caught)
    print("  NOT caught")
    return False


def train_tensorflow(root: Path, spec: Path) -> Path | None:
    step("TensorFlow: custom loop with ckptspec.tensorflow.CheckpointManager")
    try:
        import tensorflow as tf

        import ckptspec.tensorflow
    except ImportError as missing:
        print(f"  skipped: {missing}")
        return None
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam(1e-2)
    dataset = tf.data.Dataset.from_tensor_slices(tf.random.normal((64, 4))).batch(8).repeat()
    iterator = iter(dataset)
    noise = tf.random.Generator.from_seed(1)
    manager = ckptspec.tensorflow.CheckpointManager(
        root, model=model, optimizer=optimizer, generators={"noise": noise}, iterator=iterator,
        fingerprint_batch=tf.ones((2, 4)), spec=spec, max_to_keep=2,
    )
    for index in range(6):
        batch = next(iterator) + noise.normal((8, 4)) * 0.01
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(batch) - tf.reduce_sum(batch, axis=1, keepdims=True)))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        if index % 2 == 1:
            print(f"  saved {manager.save().name}")
    return Path(str(manager.latest_checkpoint))


def validate_all(paths: list[Path]) -> bool:
    step("Static validation: spec × manifest × files, read without torch or TensorFlow")
    clean = True
    for path in paths:
        result = ckptspec.validate(path)
        print(f"  {'ok  ' if result.passed else 'FAIL'} {path.name}: {len(result.findings)} findings")
        for finding in result.findings:
            print(f"       {finding.code} {finding.severity} {finding.message}")
        clean &= result.passed
    return clean


def catch_flipped_byte(checkpoint: Path, root: Path) -> bool:
    step("Trap: a checkpoint copied elsewhere with one flipped byte in one tensor")
    tampered = root / "tampered"
    tampered.mkdir()
    copy = tampered / checkpoint.name
    shutil.copyfile(checkpoint, copy)
    shutil.copyfile(ckptspec.manifest_path_for(checkpoint), ckptspec.manifest_path_for(copy))
    with open_torch_checkpoint(copy) as opened:
        pointer, tensor = next((p, t) for p, t in opened.tensors() if p.endswith("net.0.weight"))
        offset = tensor.byte_range[0]
    with copy.open("r+b") as handle:
        handle.seek(offset)
        original = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([original[0] ^ 0x01]))
    command = [sys.executable, "-m", "ckptspec", "validate", str(copy)]
    print(f"  $ ckptspec validate {copy}")
    completed = subprocess.run(command, capture_output=True, text=True)
    print("  " + completed.stdout.strip().replace("\n", "\n  "))
    print(f"  exit code {completed.returncode}")
    shutil.rmtree(tampered)
    return completed.returncode == 1 and "CKS207" in completed.stdout and pointer.split("/")[-1] in completed.stdout


def audit_all(root: Path) -> bool:
    step("Audit: every checkpoint under the output directory, one SARIF report")
    report = root / "audit.sarif"
    command = [sys.executable, "-m", "ckptspec", "audit", str(root), "--jobs", "2", "--format", "sarif", "-o", str(report)]
    completed = subprocess.run(command, capture_output=True, text=True)
    summary = subprocess.run([sys.executable, "-m", "ckptspec", "audit", str(root)], capture_output=True, text=True)
    print("  " + summary.stdout.strip().replace("\n", "\n  "))
    print(f"  SARIF report: {report} (exit code {completed.returncode})")
    return completed.returncode == 0 and report.is_file()


def registry_intake(root: Path, checkpoints: list[Path], spec: Path) -> bool:
    step("Registry intake: register the checkpoints in an embedded MLflow registry and check the version")
    from mlflow import MlflowClient

    root = root.resolve()  # the artifact store is a file URI, which a relative path cannot be

    upload = root / "upload"
    upload.mkdir(parents=True)
    for checkpoint in checkpoints:
        shutil.copyfile(checkpoint, upload / checkpoint.name)
        shutil.copyfile(ckptspec.manifest_path_for(checkpoint), ckptspec.manifest_path_for(upload / checkpoint.name))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    experiment = client.create_experiment("demo", artifact_location=(root / "artifacts").as_uri())
    run = client.create_run(experiment)
    client.log_artifacts(run.info.run_id, str(upload), artifact_path="checkpoints")
    client.create_registered_model("demo-classifier")
    version = client.create_model_version("demo-classifier", f"runs:/{run.info.run_id}/checkpoints", run_id=run.info.run_id).version
    command = [sys.executable, "-m", "ckptspec", "intake", f"models:/demo-classifier/{version}", "--tracking-uri", uri, "--spec", str(spec)]
    print(f"  $ ckptspec intake models:/demo-classifier/{version} --tracking-uri {uri} --spec {spec.name}")
    completed = subprocess.run(command, capture_output=True, text=True)
    print("  " + completed.stderr.strip().splitlines()[-1])
    tags = {key: value for key, value in client.get_model_version("demo-classifier", version).tags.items() if key.startswith("ckptspec.")}
    for key in ("ckptspec.status", "ckptspec.checkpoints", "ckptspec.errors", "ckptspec.report"):
        print(f"  {key} = {tags.get(key)}")
    alias = client.get_registered_model("demo-classifier").aliases.get("validated")
    print(f"  alias validated -> version {alias}")
    return completed.returncode == 0 and tags.get("ckptspec.status") == "passed" and str(alias) == str(version)


def prepare(output: Path) -> None:
    if output.exists() and any(output.iterdir()):
        if not (output / MARKER).exists():
            raise SystemExit(f"{output}: exists and was not made by this demo; choose another directory")
        shutil.rmtree(output)
    output.mkdir(parents=True, exist_ok=True)
    (output / MARKER).touch()


def main(output: Path) -> int:
    prepare(output)
    spec = output / "spec.yaml"
    spec.write_text(SPEC)
    ckptspec.load_spec(spec)
    lightning_root = output / "lightning"
    last = train_lightning(lightning_root, spec)
    outcomes = {
        "resume passes": resume_lightning(output / "runs", spec, last),
        "eps trap caught": catch_eps_trap(output / "runs", spec, last),
    }
    shutil.rmtree(output / "runs", ignore_errors=True)
    tf_spec = output / "spec-tensorflow.yaml"
    tf_spec.write_text(TF_SPEC)
    tf_latest = train_tensorflow(output / "tensorflow", tf_spec)
    checkpoints = sorted(p for p in lightning_root.glob("epoch=*.ckpt"))
    outcomes["checkpoints validate"] = validate_all(checkpoints + ([tf_latest] if tf_latest else []))
    outcomes["flipped byte caught"] = catch_flipped_byte(checkpoints[-1], output)
    outcomes["audit clean"] = audit_all(output)
    outcomes["intake passed, alias set"] = registry_intake(output / "registry", checkpoints, spec)
    step("Summary")
    for name, ok in outcomes.items():
        print(f"  {'yes' if ok else 'NO '}  {name}")
    return 0 if all(outcomes.values()) else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    raise SystemExit(main(Path(sys.argv[1])))
