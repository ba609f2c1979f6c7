"""A tiny BERT built from a config, a seeded dataset and one Trainer run: each run a second or two."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

VOCAB = 50
SEQUENCE = 8


def config(**overrides: Any) -> BertConfig:
    settings: dict[str, Any] = dict(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=16, num_labels=2, hidden_dropout_prob=0.1,
    )  # fmt: skip
    return BertConfig(**(settings | overrides))


def model(**overrides: Any) -> BertForSequenceClassification:
    torch.manual_seed(0)
    return BertForSequenceClassification(config(**overrides))


class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """`length` seeded samples of token ids and a label."""

    def __init__(self, length: int = 20) -> None:
        generator = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, VOCAB, (length, SEQUENCE), generator=generator)
        self.labels = torch.randint(0, 2, (length,), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.labels[index]}


def arguments(output_dir: Path, **overrides: Any) -> TrainingArguments:
    settings: dict[str, Any] = dict(
        output_dir=str(output_dir), per_device_train_batch_size=4, max_steps=12, save_steps=4, report_to=[], use_cpu=True,
        seed=0, data_seed=0, logging_steps=4, disable_tqdm=True, dataloader_num_workers=0,
        learning_rate=5e-4,
    )  # fmt: skip
    return TrainingArguments(**(settings | overrides))


def trainer(output_dir: Path, *, net: torch.nn.Module | None = None, dataset: Any = None, callbacks: list[Any] | None = None, **overrides: Any) -> Trainer:
    return Trainer(
        model=net if net is not None else model(),
        args=arguments(output_dir, **overrides),
        train_dataset=dataset if dataset is not None else Tokens(),
        callbacks=callbacks,
    )


def weights(trained: Trainer) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in trained.model.state_dict().items()}
