"""Views whose element count is far beyond the bytes a file holds: a broadcast (`expand`, stride 0)
or an overlapping `as_strided` saved by torch, and files edited to claim shapes, strides or offsets
their storage cannot hold. Digests and reads are bounded by the bytes present; an impossible view
is a named problem; none of it is an internal error."""

from __future__ import annotations

import collections
import hashlib
import warnings
from pathlib import Path

import pytest

from ckptspec._crc32c import crc32c

from ._limited import ADDRESS_SPACE, assert_judged, run_limited

torch = pytest.importorskip("torch")

BROADCAST = 10**8
"""400 MB laid out row-major: more than the checker's whole address space."""


class _Claimed:
    """Pickles as the tensor torch would rebuild from `storage` with this layout, whatever the storage holds."""

    def __init__(self, storage: object, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> None:
        self.layout = (storage, offset, size, stride)

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return torch._utils._rebuild_tensor_v2, (*self.layout, False, collections.OrderedDict())


def _claimed(path: Path, size: tuple[int, ...], stride: tuple[int, ...], offset: int = 0) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated, but it is what torch.save pickles
        storage = torch.arange(4, dtype=torch.float32).storage()
    torch.save({"w": _Claimed(storage, offset, size, stride)}, path)
    return path


@pytest.fixture
def broadcast(tmp_path: Path) -> Path:
    path = tmp_path / "broadcast.pt"
    torch.save({"w": torch.full((1,), 1.5).expand(BROADCAST), "step": 3}, path)
    return path


@pytest.mark.parametrize("legacy", [False, True], ids=["zip", "legacy"])
def test_a_broadcast_tensor_adopts_validates_and_diffs_under_256_mib(tmp_path: Path, legacy: bool) -> None:
    path = tmp_path / "broadcast.pt"
    torch.save({"w": torch.full((1,), 1.5).expand(BROADCAST)}, path, _use_new_zipfile_serialization=not legacy)
    loaded = torch.load(path)["w"]
    # The trap: a file of a few kilobytes whose tensor, laid out row-major, is gigabytes.
    assert path.stat().st_size < 4096 < ADDRESS_SPACE < loaded.numel() * loaded.element_size()

    adopted = run_limited("manifest", path)
    assert_judged(adopted)
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    manifest = Path(f"{path}.ckptspec.yaml").read_text()
    # The digest torch's own row-major layout has, taken here a slice at a time.
    expected = 0
    for start in range(0, BROADCAST, BROADCAST // 10):
        expected = crc32c(loaded[start : start + BROADCAST // 10].contiguous().numpy().tobytes(), expected)
    assert f"crc32c: {expected:08x}" in manifest
    for command in (("validate", path), ("diff", path, path), ("inspect", path)):
        result = run_limited(*command)
        assert_judged(result)
        assert result.returncode == 0, (command, result.stdout + result.stderr)


def test_an_overlapping_view_is_digested_over_its_span(tmp_path: Path) -> None:
    base = torch.arange(2 * 10**4, dtype=torch.float32)
    path = tmp_path / "sliding.pt"
    torch.save({"w": base.as_strided((10**4, 10**4), (1, 1))}, path)  # 10**8 elements over 80 kB

    adopted = run_limited("manifest", path)
    assert_judged(adopted)
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    span = base[: 2 * 10**4 - 1].numpy().tobytes()
    assert f"crc32c: {crc32c(span):08x}" in Path(f"{path}.ckptspec.yaml").read_text()
    assert run_limited("validate", path).returncode == 0


def test_a_view_that_does_not_overlap_keeps_its_row_major_digest(tmp_path: Path) -> None:
    view = torch.arange(100, dtype=torch.float32).as_strided((10, 5), (1, 10), 3)
    path = tmp_path / "transposed.pt"
    torch.save({"w": view}, path)
    adopted = run_limited("manifest", path)
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    assert f"crc32c: {crc32c(view.contiguous().numpy().tobytes()):08x}" in Path(f"{path}.ckptspec.yaml").read_text()


def test_a_broadcast_in_a_directory_audits_without_an_internal_error(broadcast: Path) -> None:
    assert run_limited("manifest", broadcast).returncode == 0
    result = run_limited("audit", broadcast.parent)
    assert_judged(result)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("size", "stride", "offset", "named"),
    [
        ((10**12,), (1,), 0, "needs bytes up to 4000000000000 of storage"),
        ((2,), (1,), 10**15, "of storage"),
        ((10**6, 10**6), (10**9, 1), 0, "of storage"),
        ((10**12, 10**12), (0, 0), 0, "more than torch can address"),
    ],
    ids=["shape", "offset", "stride", "elements"],
)
def test_an_impossible_view_is_a_named_problem(tmp_path: Path, size: tuple[int, ...], stride: tuple[int, ...], offset: int, named: str) -> None:
    path = _claimed(tmp_path / "claimed.pt", size, stride, offset)
    with pytest.raises(RuntimeError):
        torch.load(path)  # torch refuses the layout too: it is no tensor at all
    for command in (("manifest", path), ("validate", path), ("inspect", path), ("diff", path, path)):
        result = run_limited(*command)
        output = assert_judged(result)
        assert result.returncode != 0, (command, output)
        assert named in output and "w" in output, (command, output)
    assert not Path(f"{path}.ckptspec.yaml").exists()


def test_every_broadcast_keeps_the_row_major_crc32c_of_its_elements(tmp_path: Path) -> None:
    from ckptspec.formats.torchzip import open_torch_checkpoint

    base = torch.arange(24, dtype=torch.float32)
    views = {
        "rows": base[:3].reshape(3, 1).expand(3, 1000),
        "columns": base[:5].expand(700, 5),
        "middle": base[:6].reshape(2, 1, 3).expand(2, 400, 3),
        "nested": base.reshape(2, 1, 3, 1, 4).expand(2, 5, 3, 7, 4),
        "scalar": base[7].expand(3, 1, 9),
        "transposed": base[:6].reshape(2, 3).t().reshape(3, 2, 1).expand(3, 2, 50),
    }
    path = tmp_path / "broadcasts.pt"
    torch.save(views, path)
    with open_torch_checkpoint(path) as checkpoint:
        for name, view in views.items():
            assert checkpoint.tree[name].overlaps, name
            assert checkpoint.tree[name].crc32c() == crc32c(view.contiguous().numpy().tobytes()), name
            assert checkpoint.tree[name].sha256() == hashlib.sha256(view.contiguous().numpy().tobytes()).hexdigest(), name
