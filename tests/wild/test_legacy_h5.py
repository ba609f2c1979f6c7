"""A legacy `.h5` model save keeps the model's config in its root `model_config` attribute: it is the
construction config (not "a weights file holds no layer config"), and a Lambda layer's bytecode in it
is code a load runs (it passed unseen)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ckptspec import load_manifest, validate
from ckptspec.adopt import adopt

pytestmark = pytest.mark.tensorflow


def test_the_model_config_is_recorded_and_checked(legacy_h5: dict[str, Path], tmp_path: Path) -> None:
    path = tmp_path / "fitted.h5"
    shutil.copyfile(legacy_h5["fitted"], path)
    config = load_manifest(adopt(path)).components.config
    assert config is not None
    assert [module.type for module in config.modules] == [
        "Functional", "Embedding", "GRU", "BatchNormalization", "Dropout", "Dense"
    ]  # fmt: skip
    assert [(f.code, f.severity) for f in validate(path).findings] == [("CKS004", "warning")]


def test_a_lambda_layer_is_named_as_code(legacy_h5: dict[str, Path]) -> None:
    messages = [f.message for f in validate(legacy_h5["lambda"]).findings if f.code == "CKS401"]
    assert messages == [
        f"model_config names keras.{name} (1×), which is not on the allow-list: loading it runs that code (to trust it, list it under pickle.allow in the spec passed with --spec)"
        for name in ("Lambda", "__lambda__")
    ]


@pytest.mark.parametrize(
    ("config", "why"),
    [("{nope", "is not valid JSON"), ("[" * 100_000 + "]" * 100_000, "is not valid JSON"), (None, "is not text")],
    ids=["not-json", "nested-too-deep", "array-of-names"],
)
def test_a_malformed_model_config_is_a_finding(tmp_path: Path, config: str | None, why: str) -> None:
    """Hand-written attributes (the hostile input itself): each is one finding naming the attribute, never a traceback."""
    h5py = pytest.importorskip("h5py")
    import numpy as np

    path = tmp_path / "model.h5"
    with h5py.File(path, "w") as handle:
        handle.create_dataset("model_weights/dense/dense/kernel:0", data=np.ones((2, 2), dtype="float32"))
        handle.attrs["model_config"] = np.array([b"a", b"b"]) if config is None else config
    (finding,) = [f for f in validate(path).findings if f.code == "CKS001"]
    assert finding.message.startswith(f"{path}: the model_config attribute {why}")
