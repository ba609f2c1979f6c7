import pytest

pytest.importorskip("tensorflow")

import tensorflow as tf  # noqa: E402

# Exact resume is only defined for deterministic kernels; the setting is process-wide and harmless elsewhere.
tf.config.experimental.enable_op_determinism()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "adapters_tf" in str(item.path):
            item.add_marker(pytest.mark.tensorflow)
