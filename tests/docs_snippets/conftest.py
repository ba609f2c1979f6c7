import pytest

_MARKERS = {"test_tensorflow_page.py": "tensorflow", "test_torch_page.py": "torch", "test_lightning_pages.py": "lightning"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "docs_snippets" in str(item.path) and item.path.name in _MARKERS:
            item.add_marker(getattr(pytest.mark, _MARKERS[item.path.name]))
