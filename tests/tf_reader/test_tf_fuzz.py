"""Any single damaged byte of a real TensorFlow bundle's index gives a `CkptspecError`, a list of
problems, or a clean read; never another exception."""

from __future__ import annotations

import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptspec import CkptspecError
from ckptspec.formats.inspect import inspect_checkpoint
from ckptspec.formats.tfbundle import verify_bundle

from .tf_written import WrittenBundle


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(position=st.floats(0, 1, exclude_max=True), value=st.integers(0, 255))
def test_one_damaged_index_byte_never_escapes_as_another_error(
    tf_bundles: dict[str, WrittenBundle], tmp_path: Path, position: float, value: int
) -> None:
    (name, written), *_ = tf_bundles.items()
    prefix = tmp_path / name / written.prefix.name
    shutil.rmtree(prefix.parent, ignore_errors=True)
    prefix = written.copy_to(prefix.parent)
    index = Path(f"{prefix}.index")
    damaged = bytearray(index.read_bytes())
    damaged[int(position * len(damaged))] = value
    index.write_bytes(bytes(damaged))
    assert all(problem.file for problem in verify_bundle(prefix))
    try:
        inspect_checkpoint(prefix)
    except CkptspecError:
        pass
