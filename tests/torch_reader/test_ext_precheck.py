"""The EXT-opcode rewrite walks a pickle's opcodes only when the pickle holds an EXT opcode, or when
this process has extensions registered: real checkpoints are read without the walk."""

from __future__ import annotations

import pickletools
from pathlib import Path

import pytest

from ckptspec.formats.torchzip import open_torch_checkpoint


def test_real_checkpoints_are_read_without_the_opcode_walk(
    lightning_corpus: dict[str, Path], plain_corpus: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    walked: list[int] = []
    real_genops = pickletools.genops

    def counting_genops(data: bytes):  # type: ignore[no-untyped-def]
        walked.append(len(data))
        return real_genops(data)

    monkeypatch.setattr(pickletools, "genops", counting_genops)
    paths = [*lightning_corpus.values(), *(p for p in plain_corpus.values() if p.suffix in {".pt", ".ckpt", ".pth"})]
    assert paths
    tensors = 0
    for path in paths:
        with open_torch_checkpoint(path) as checkpoint:
            tensors += sum(1 for _ in checkpoint.tensors())
    assert tensors > len(paths)
    assert walked == []
