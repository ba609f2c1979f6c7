"""Fingerprint replay at intake: a real Lightning run exports its program and signs it; the
registry replays the fixed batch with no training code, and catches a program rebuilt with another
BatchNorm eps, a program of another architecture, and a program that would run code when loaded."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest

from .conftest import copy_checkpoint, run_cli

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_lightning")

from ckptspec.lightning import CkptspecCallback  # noqa: E402

from ._lightning_training import TinyRegressor, fit  # noqa: E402

_BATCH = torch.linspace(-2, 2, 12).reshape(4, 3)
_SIDECARS = (".ckptspec.yaml", ".pt2", ".sig")


@pytest.fixture(scope="session")
def exported_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A real `Trainer.fit` whose callback exports the program and signs every checkpoint; the public key."""
    from .test_signing import _write_key_pair

    directory = tmp_path_factory.mktemp("exported")
    private, public = _write_key_pair(directory, "release")
    callback = CkptspecCallback(fingerprint_batch=_BATCH, export_program=True, signing_key=private)
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checkpoint = fit(directory / "run", callbacks=[callback])
    return checkpoint, public


def _codes(*args: str | Path) -> tuple[int, list[str], str]:
    code, out, err = run_cli("validate", *args, "--format", "json")
    findings = json.loads(out)["results"][0]["findings"] if out else []
    return code, [finding["code"] for finding in findings], out + err


def _replaced_program(checkpoint: Path, model: torch.nn.Module, *, with_weights: bool = True) -> None:
    """Export `model` (given the checkpoint's weights) over the program beside `checkpoint`."""
    if with_weights:
        model.load_state_dict(torch.load(checkpoint, weights_only=True)["state_dict"])
    model.eval()
    torch.export.save(torch.export.export(model, (_BATCH,)), Path(f"{checkpoint}.pt2"))


def test_the_callback_writes_program_and_signature_and_replay_passes(exported_run: tuple[Path, Path]) -> None:
    checkpoint, public = exported_run
    assert all(Path(f"{checkpoint}{suffix}").is_file() for suffix in _SIDECARS)
    code, codes, text = _codes(checkpoint, "--replay", "--trusted-key", public, "--require-signature")
    assert not {"CKS336", "CKS337", "CKS338", "CKS418"} & set(codes), text
    assert not [code for code in codes if code.startswith("CKS25")], text


def test_program_rebuilt_with_another_batchnorm_eps_is_caught(exported_run: tuple[Path, Path], tmp_path: Path) -> None:
    checkpoint = copy_checkpoint(exported_run[0], tmp_path / "run")
    model = TinyRegressor()
    model.net[1].eps = 1e-2  # the constant no state dict holds
    _replaced_program(checkpoint, model)
    code, codes, text = _codes(checkpoint, "--replay")
    assert code == 1 and "CKS336" in codes, text
    assert "output 'output' differs from the saved one" in text
    code, codes, text = _codes(checkpoint, "--replay", "--trusted-key", exported_run[1])
    assert "CKS253" in codes and ".pt2 changed after signing" in text  # the signature saw the swap too


def test_program_of_another_architecture_is_named_without_torch_running_it(exported_run: tuple[Path, Path], tmp_path: Path) -> None:
    checkpoint = copy_checkpoint(exported_run[0], tmp_path / "run")
    _replaced_program(checkpoint, TinyRegressor(hidden=6), with_weights=False)
    code, codes, text = _codes(checkpoint)
    assert code == 1 and "CKS338" in codes, text
    assert "'net.0.weight' is float32 [6, 3]; the checkpoint's is float32 [4, 3]" in text


def _pickled_weight_program(program: Path, payload: bytes) -> None:
    """Rewrite a real program so that its first weight is a pickle, as torch.export.save writes for
    weights it cannot store raw (`use_pickle`)."""
    with zipfile.ZipFile(program) as source:
        records = {info.filename: source.read(info) for info in source.infolist()}
    (config_name,) = [name for name in records if name.endswith("_weights_config.json")]
    config = json.loads(records[config_name])
    first = next(iter(config["config"].values()))
    first["use_pickle"] = True
    records[config_name] = json.dumps(config).encode()
    records[config_name.rsplit("/", 1)[0] + "/" + first["path_name"]] = payload
    with zipfile.ZipFile(program, "w") as target:
        for name, data in records.items():
            target.writestr(name, data)


def test_program_that_would_run_code_is_refused_and_never_loaded(exported_run: tuple[Path, Path], tmp_path: Path) -> None:
    checkpoint = copy_checkpoint(exported_run[0], tmp_path / "run")
    program = Path(f"{checkpoint}.pt2")
    marker = tmp_path / "executed"
    payload = b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR."
    _pickled_weight_program(program, payload)

    code, codes, text = _codes(checkpoint, "--replay")
    assert code == 1 and "CKS418" in codes and "CKS337" in codes, text
    assert "unpickles with weights_only=False" in text
    assert not marker.exists()

    proof = subprocess.run(
        [sys.executable, "-c", f"import torch; torch.export.load({str(program)!r})"], capture_output=True, timeout=120
    )
    assert marker.exists(), proof.stderr.decode()[-2000:]  # torch itself would have run it


def test_replay_without_a_program_says_it_did_not_run(exported_run: tuple[Path, Path], tmp_path: Path) -> None:
    checkpoint = copy_checkpoint(exported_run[0], tmp_path / "run")
    Path(f"{checkpoint}.pt2").unlink()
    code, codes, text = _codes(checkpoint, "--replay")
    assert "CKS337" in codes and "no exported program" in text


def test_removing_a_checkpoint_removes_its_program_and_signature(exported_run: tuple[Path, Path]) -> None:
    checkpoints = exported_run[0].parent
    for leftover in checkpoints.iterdir():
        stem = leftover.name
        for suffix in _SIDECARS:
            stem = stem.removesuffix(suffix)
        assert (checkpoints / stem).is_file(), f"{leftover.name} outlived its checkpoint"


def test_torch_save_exports_and_signs(tmp_path: Path) -> None:
    from ckptspec.torch import save

    from .test_signing import _write_key_pair

    private, public = _write_key_pair(tmp_path, "key")
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
    path = tmp_path / "model.pt"
    save(path, model=model, fingerprint_batch=_BATCH, export_program=True, signing_key=private)
    code, codes, text = _codes(path, "--replay", "--trusted-key", public, "--require-signature")
    assert not {"CKS336", "CKS337", "CKS338", "CKS418", "CKS250", "CKS251", "CKS252", "CKS253"} & set(codes), text
