"""Keras files are written once per session, by a real `model.fit`; the suite skips without Keras."""

from __future__ import annotations

import pytest

from .keras_written import KerasRun, write_run


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/keras/" in str(item.path):
            item.add_marker(pytest.mark.tensorflow)


@pytest.fixture(scope="session")
def keras_run(tmp_path_factory: pytest.TempPathFactory) -> KerasRun:
    pytest.importorskip("keras")
    return write_run(tmp_path_factory.mktemp("keras"))
