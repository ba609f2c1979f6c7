"""Nothing inside an upload makes ckptspec read outside the prefix the operator named: not an object
key with `..` or empty segments, not a TF state file's pointer to another URL or a chained one."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckptspec import audit, validate
from ckptspec._exceptions import CkptspecError, ReaderError
from ckptspec.formats import tf_state

from ._store import PROTOCOL, HostileStore


def _audited(url: str) -> dict[str, list[tuple[str, str]]]:
    return {result.checkpoint: [(f.code, f.message) for f in result.findings] for result in audit([url]).results}


@pytest.mark.parametrize("key", ["/upload/../outside/model.pt", "/upload/./model.pt", "/upload/a//model.pt", "/upload/sub/../../outside/model.pt"])
def test_an_aliasing_key_is_reported_and_never_read_as_another_object(store: type[HostileStore], torch_file: Path, key: str) -> None:
    store.put_raw("/outside/model.pt", torch_file.read_bytes())
    store.put_raw("/upload/model.pt", torch_file.read_bytes())
    store.put_raw(key, b"the uploader's bytes")

    results = _audited(f"{PROTOCOL}://upload")

    assert not any("/outside/" in checkpoint and "/upload/" not in checkpoint for checkpoint in results)
    reported = results[f"{PROTOCOL}://{key}"]
    assert reported[0][0] == "CKS001" and "names another object once normalised" in reported[0][1]


def test_a_key_that_is_both_an_object_and_a_prefix_is_a_finding(store: type[HostileStore], torch_file: Path) -> None:
    store.put_raw("/upload/model.pt", torch_file.read_bytes())
    store.put_raw("/upload/model.pt/inner.pt", torch_file.read_bytes())
    store.put_raw("/upload/" + "n" * 2000 + ".pt", b"junk")

    results = _audited(f"{PROTOCOL}://upload")

    assert set(results) == {f"{PROTOCOL}:///upload/model.pt", f"{PROTOCOL}:///upload/model.pt/inner.pt", f"{PROTOCOL}:///upload/{'n' * 2000}.pt"}
    assert all(findings for findings in results.values())


@pytest.mark.parametrize(
    "pointer",
    [f"{PROTOCOL}://outside/ckpt-1", "simplecache::memory://outside/ckpt-1", "file:///outside/ckpt-1", "/outside/ckpt-1", "../outside/ckpt-1", "..//outside/ckpt-1"],
)
def test_a_state_file_pointer_never_leads_out_of_the_prefix(store: type[HostileStore], pointer: str) -> None:
    store.put_raw("/outside/ckpt-1.index", b"an index outside the upload")
    store.put_raw("/upload/checkpoint", f'model_checkpoint_path: "{pointer}"\nall_model_checkpoint_paths: "{pointer}"\n'.encode())

    with pytest.raises(ReaderError) as raised:
        tf_state.latest_checkpoint(f"{PROTOCOL}://upload")
    assert "outside" in str(raised.value) or "does not exist" in str(raised.value)
    assert all(str(prefix).startswith(f"{PROTOCOL}:///upload/") for prefix in tf_state.list_checkpoints(f"{PROTOCOL}://upload"))


@pytest.mark.parametrize("short_by", [1, 4096])
def test_a_range_answered_with_fewer_bytes_is_a_finding_naming_the_file(store: type[HostileStore], torch_file: Path, short_by: int) -> None:
    store.put_raw("/upload/model.pt", torch_file.read_bytes())
    store.short_by = short_by

    (findings,) = _audited(f"{PROTOCOL}://upload").values()

    assert ("CKS001", f"{PROTOCOL}:///upload/model.pt") in [(code, message.partition(": ")[0]) for code, message in findings]
    assert any("the store returned" in message for _, message in findings)


def test_an_object_truncated_after_listing_is_a_finding(store: type[HostileStore], torch_file: Path) -> None:
    payload = torch_file.read_bytes()
    store.put_raw("/upload/model.pt", payload)
    original_info = HostileStore.info

    def stale_info(self: HostileStore, path: str, **kwargs: object) -> dict[str, object]:
        info = dict(original_info(self, path, **kwargs))
        if info.get("type") == "file":
            info["size"] = len(payload) + 1000  # the listing's size; the object shrank since
        return info

    HostileStore.info = stale_info  # type: ignore[method-assign]
    try:
        with pytest.raises(CkptspecError) as raised:
            validate(f"{PROTOCOL}://upload/model.pt")
    finally:
        HostileStore.info = original_info  # type: ignore[method-assign]

    assert str(raised.value).startswith(f"{PROTOCOL}:///upload/model.pt: ") and "the store returned" in str(raised.value)


@pytest.mark.parametrize("kind", ["torch-zip", "legacy-torch", "safetensors"])
@pytest.mark.parametrize("misbehaviour", ["short_by", "ignore_range"])
def test_a_store_answering_ranges_wrongly_is_a_finding_on_the_file(store: type[HostileStore], real_files: dict[str, Path], kind: str, misbehaviour: str) -> None:
    name = real_files[kind].name
    store.put_raw(f"/upload/{name}", real_files[kind].read_bytes())
    setattr(store, misbehaviour, 1 if misbehaviour == "short_by" else True)

    (findings,) = _audited(f"{PROTOCOL}://upload").values()

    refused = [message for code, message in findings if code == "CKS001"]
    assert refused and refused[0].startswith(f"{PROTOCOL}:///upload/{name}: ") and "the store returned" in refused[0]


def test_an_empty_folder_marker_is_no_file(store: type[HostileStore], torch_file: Path) -> None:
    store.put_raw("/upload/runs/", b"")  # what a console's "create folder" leaves
    store.put_raw("/upload/empty/", b"")
    store.put_raw("/upload/runs/model.pt", torch_file.read_bytes())

    results = _audited(f"{PROTOCOL}://upload")

    assert list(results) == [f"{PROTOCOL}:///upload/runs/model.pt"]
    assert "CKS001" not in {code for code, _ in results[f"{PROTOCOL}:///upload/runs/model.pt"]}
