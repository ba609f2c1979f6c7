"""Plain torch.save files: the reader's tree equals torch.load's, and tensor bytes hash as torch's do."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
crc32c = pytest.importorskip("crc32c")

from ._torch_compare import assert_same_tree  # noqa: E402
from ._torch_corpus import RunConfig, rewrite_archive, tensor_bytes  # noqa: E402

from ckptspec.formats._pickle_safety import Stub  # noqa: E402
from ckptspec.formats.torchzip import open_torch_checkpoint  # noqa: E402


def test_every_file_reads_as_torch_load_does(plain_corpus: dict[str, Path]) -> None:
    for name, path in plain_corpus.items():
        theirs = torch.load(path, weights_only=False)
        with open_torch_checkpoint(path) as checkpoint:
            if name == "module.pt":
                assert isinstance(checkpoint.tree, Stub)
                assert checkpoint.tree.qualname == "torch.nn.modules.container.Sequential"
                assert_same_tree(checkpoint.tree.state["_modules"]["0"].state["_parameters"],
                                 theirs[0]._parameters)  # fmt: skip
                continue
            compared = assert_same_tree(checkpoint.tree, theirs)
            assert compared == sum(1 for _ in checkpoint.tensors()), name


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_pickle_protocol_is_recorded(plain_corpus: dict[str, Path], protocol: int) -> None:
    with open_torch_checkpoint(plain_corpus[f"protocol{protocol}.pt"]) as checkpoint:
        assert checkpoint.metadata["pickle_protocol"] == protocol


@pytest.mark.parametrize(("name", "root"), [("my.model.ckpt", "my.model"), ("buffer.pt", "archive"),
                                            ("dtypes.pt", "dtypes")])  # fmt: skip
def test_archive_root_is_whatever_torch_wrote(plain_corpus: dict[str, Path], name: str, root: str) -> None:
    with open_torch_checkpoint(plain_corpus[name]) as checkpoint:
        assert checkpoint.archive_root == root
        assert checkpoint.metadata["torch_zip_version"] == "3"


def test_crc32c_of_contiguous_tensors_matches_numpy_bytes(plain_corpus: dict[str, Path]) -> None:
    theirs = torch.load(plain_corpus["dtypes.pt"], weights_only=True)
    numpy_dtypes = {"float32", "float64", "float16", "int64", "int32", "int16", "int8", "uint8", "bool",
                    "complex64", "complex128", "uint16", "uint32", "uint64"}  # fmt: skip
    with open_torch_checkpoint(plain_corpus["dtypes.pt"]) as checkpoint:
        for key, tensor in checkpoint.tree.items():
            if key in numpy_dtypes:
                assert tensor.crc32c() == crc32c.crc32c(theirs[key].contiguous().numpy().tobytes()), key
            assert tensor.crc32c() == crc32c.crc32c(tensor_bytes(theirs[key])), key
            assert tensor.sha256() == hashlib.sha256(tensor_bytes(theirs[key])).hexdigest(), key


def test_views_share_one_storage_and_hash_in_row_major_order(plain_corpus: dict[str, Path]) -> None:
    theirs = torch.load(plain_corpus["views.pt"], weights_only=True)
    with open_torch_checkpoint(plain_corpus["views.pt"]) as checkpoint:
        refs = checkpoint.tree
        assert len({ref.storage.key for ref in refs.values()}) == 1
        assert refs["row"].storage_offset == 12 and refs["row"].is_contiguous
        assert not refs["transposed"].is_contiguous and not refs["broadcast"].is_contiguous
        start, end = refs["transposed"].byte_range
        assert end - start == 24 * 4, "a non-contiguous view's range spans the storage it touches"
        for key, ref in refs.items():
            assert ref.crc32c() == crc32c.crc32c(theirs[key].contiguous().numpy().tobytes()), key


def test_byte_range_points_at_the_tensor_in_the_file(plain_corpus: dict[str, Path]) -> None:
    theirs = torch.load(plain_corpus["dtypes.pt"], weights_only=True)
    raw = plain_corpus["dtypes.pt"].read_bytes()
    with open_torch_checkpoint(plain_corpus["dtypes.pt"]) as checkpoint:
        for pointer, tensor in checkpoint.tensors():
            start, end = tensor.byte_range
            assert raw[start:end] == tensor_bytes(theirs[pointer[1:]]), pointer


def test_parameters_subclass_state_and_quantized_tensors(plain_corpus: dict[str, Path]) -> None:
    with open_torch_checkpoint(plain_corpus["parameters.pt"]) as checkpoint:
        tree = checkpoint.tree
        assert tree["trained"].is_parameter and tree["trained"].requires_grad
        assert tree["frozen"].is_parameter and not tree["frozen"].requires_grad
        assert tree["tagged"].extra["state"] == {"note": "with python state"}
        assert not tree["annotated"].is_parameter and tree["annotated"].extra["state"] == {"unit": "m/s"}
        assert tree["conj"].extra == {"conj": True}
    with open_torch_checkpoint(plain_corpus["quantized.pt"]) as checkpoint:
        per_tensor, per_channel = checkpoint.tree["per_tensor"], checkpoint.tree["per_channel"]
        assert per_tensor.dtype == "qint8" and per_tensor.quantization == ("torch.per_tensor_affine", 0.1, 3)
        assert per_channel.dtype == "quint8" and per_channel.quantization[0] == "torch.per_channel_affine"


def test_user_classes_are_stubs_that_keep_their_state(plain_corpus: dict[str, Path]) -> None:
    with open_torch_checkpoint(plain_corpus["user_objects.pt"]) as checkpoint:
        config = checkpoint.tree["config"]
        assert isinstance(config, Stub) and config.state == {"depth": 3, "name": "deep"}
        safety = {(g.module, g.name): g.safety for g in checkpoint.globals}
        assert safety[(RunConfig.__module__, "RunConfig")] == "dangerous"
        assert safety[("torch._utils", "_rebuild_tensor_v2")] == "allowed"


def test_module_pickles_expose_their_tensors_below_stub_state(plain_corpus: dict[str, Path]) -> None:
    with open_torch_checkpoint(plain_corpus["module.pt"]) as checkpoint:
        pointers = [pointer for pointer, _ in checkpoint.tensors()]
        assert "/state/_modules/0/state/_parameters/weight" in pointers
        assert checkpoint.resolve("/state/_modules/0/state/_parameters/weight").shape == (8, 4)


def test_big_endian_archives_are_reported_and_hashed_as_stored(plain_corpus: dict[str, Path], tmp_path: Path) -> None:
    big = rewrite_archive(plain_corpus["dtypes.pt"], tmp_path / "big.pt", replace={"byteorder": b"big"})
    raw = big.read_bytes()
    with open_torch_checkpoint(big) as checkpoint:
        assert checkpoint.byteorder == "big" and checkpoint.metadata["byteorder"] == "big"
        tensor = checkpoint.tree["float32"]
        start, end = tensor.byte_range
        assert tensor.crc32c() == crc32c.crc32c(raw[start:end])


def test_nothing_is_read_once_closed(plain_corpus: dict[str, Path]) -> None:
    from ckptspec import ReaderError

    with open_torch_checkpoint(plain_corpus["state_dict.pt"]) as checkpoint:
        tensor = next(iter(checkpoint.tree.values()))
    with pytest.raises(ReaderError, match="closed"):
        tensor.crc32c()


def test_random_views_hash_like_their_contiguous_copy(tmp_path: Path) -> None:
    hypothesis = pytest.importorskip("hypothesis")
    strategies = hypothesis.strategies

    @hypothesis.settings(max_examples=25, deadline=None)
    @hypothesis.given(
        shape=strategies.lists(strategies.integers(1, 5), min_size=1, max_size=3),
        step=strategies.integers(1, 3),
        permute=strategies.booleans(),
        dtype=strategies.sampled_from([torch.float32, torch.bfloat16, torch.int8, torch.complex64]),
    )
    def check(shape: list[int], step: int, permute: bool, dtype: torch.dtype) -> None:
        base = torch.arange(int(torch.tensor(shape).prod()) * step).to(dtype)
        view = base[::step].reshape(shape)
        if permute:
            view = view.permute(*reversed(range(view.dim())))
        torch.save({"v": view}, tmp_path / "v.pt")
        with open_torch_checkpoint(tmp_path / "v.pt") as checkpoint:
            assert checkpoint.tree["v"].read_bytes() == tensor_bytes(view)
            assert checkpoint.tree["v"].crc32c() == crc32c.crc32c(tensor_bytes(view))

    check()
