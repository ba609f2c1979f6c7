"""Write every TensorFlow bundle the tests read once per session; the suite skips without TensorFlow."""

from __future__ import annotations

import pytest
from .tf_written import BUILDERS, WrittenBundle


@pytest.fixture(scope="session")
def tf_bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, WrittenBundle]:
    tf = pytest.importorskip("tensorflow")
    # Other suites may have enabled op determinism in this process, which refuses unseeded random ops.
    tf.random.set_seed(0)
    written = {}
    for name, build in BUILDERS.items():
        directory = tmp_path_factory.mktemp(name)
        written[name] = build(tf, directory)
    return written
