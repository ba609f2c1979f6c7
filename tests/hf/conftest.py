"""One plain Trainer run shared by the intake tests: `checkpoint-4/`, `-8/` and `-12/` as the Trainer writes them."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def trainer_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ._tiny import trainer

    output = tmp_path_factory.mktemp("trainer") / "run"
    trainer(output).train()
    return output


def fingerprint_batch() -> dict[str, object]:
    from ._tiny import Tokens

    return {"input_ids": Tokens(length=3).ids}


@pytest.fixture(scope="session")
def recorded_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """A run of 12 steps with the callback: its output directory and its final weights (the
    uninterrupted run every resume is compared with)."""
    from ckptspec.transformers import CkptspecCallback

    from ._tiny import trainer, weights

    output = tmp_path_factory.mktemp("recorded") / "run"
    trained = trainer(output, callbacks=[CkptspecCallback(fingerprint_batch=fingerprint_batch())])
    trained.train()
    return output, weights(trained)
