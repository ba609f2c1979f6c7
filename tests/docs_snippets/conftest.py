import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "docs_snippets" not in str(item.path):
            continue
        if "tensorflow" in item.path.name:
            item.add_marker(pytest.mark.tensorflow)
        else:
            item.add_marker(pytest.mark.lightning)
