import pytest

pytest.importorskip("tensorflow")

import tensorflow as tf  # noqa: E402

# Exact resume is only defined for deterministic kernels. The setting is process-wide, and under it a
# random op with no seed raises: the global seed set with it lets the TF tests of other folders in
# the same session draw unseeded, whichever runs first.
tf.config.experimental.enable_op_determinism()
tf.random.set_seed(0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "adapters_tf" in str(item.path):
            item.add_marker(pytest.mark.tensorflow)
