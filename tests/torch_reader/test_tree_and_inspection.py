"""Walking the tree (pointers, shared and cyclic containers) and the inspection summary of plain files."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from ckptspec.formats.torchzip import inspect_torch_checkpoint, unpickle_untrusted
from ckptspec.formats._tree import resolve_pointer, walk


def test_pointers_escape_slashes_and_tildes() -> None:
    tree = {"a/b": {"~x": [10, 20]}, 3: "int key"}
    pointers = dict(walk(tree))
    assert pointers["/a~1b/~0x/1"] == 20 and pointers["/3"] == "int key"
    assert resolve_pointer(tree, "/a~1b/~0x/1") == 20


def test_cyclic_and_shared_containers_are_expanded_once() -> None:
    cyclic: list = [1]
    cyclic.append(cyclic)
    shared = {"x": 1}
    tree, _ = unpickle_untrusted(pickle.dumps({"cycle": cyclic, "a": shared, "b": shared}, protocol=2))
    pointers = [pointer for pointer, _ in walk(tree)]
    assert pointers == ["", "/cycle", "/cycle/0", "/cycle/1", "/a", "/a/x", "/b"]


def test_deep_nesting_is_walked_without_recursion() -> None:
    deep = b"\x80\x02" + b"]" * 50_000 + b"a" * 49_999 + b"."
    tree, _ = unpickle_untrusted(deep)
    assert sum(1 for _ in walk(tree)) == 50_000


def test_plain_checkpoint_components_and_json(plain_corpus: dict[str, Path]) -> None:
    torch = pytest.importorskip("torch")
    inspection = inspect_torch_checkpoint(plain_corpus["training.pt"])
    expected = {"model": "/model", "optimizer": "/optimizer", "scheduler": "/scheduler", "scaler": "/scaler",
                "rng": "/rng", "config": "/args"}  # fmt: skip
    assert inspection.format == "torch" and inspection.components == expected
    theirs = torch.load(plain_corpus["training.pt"], weights_only=False)
    document = json.loads(json.dumps(inspection.to_json(include_tensors=True)))
    model = next(c for c in document["components"] if c["name"] == "model")
    assert model["tensor_count"] == len(theirs["model"])
    assert {t["key"] for t in document["tensors"] if t["component"] == "rng"} == {"/rng/torch"}
    assert {g["safety"] for g in document["globals"]} == {"allowed"}


def test_bare_state_dict_is_the_model(plain_corpus: dict[str, Path]) -> None:
    inspection = inspect_torch_checkpoint(plain_corpus["state_dict.pt"])
    assert inspection.components == {"model": ""}
    assert {t.component for t in inspection.tensors} == {"model"}
