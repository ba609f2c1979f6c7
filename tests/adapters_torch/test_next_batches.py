"""A mid-epoch resume of a plain-torch loop: the batches drawn after the restore against the ones the
run drew after the save (`save(loader=)`, `restore(loader=)`), and the generators before the first batch.

Each bug trains on without an error and ends in other weights than the uninterrupted run; ckptspec
names it where the loop draws."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import ckptspec.torch as ckpt  # noqa: E402
from ckptspec import AdapterError, RestoreError, load_manifest  # noqa: E402
from ckptspec.cli import cli  # noqa: E402

SAVE_AT, STEPS, BATCH = 11, 20, 8  # 8 batches an epoch: saved 3 batches into the second epoch


@dataclass
class _Position:
    """The loop's place: epoch, batches trained in it, and the shuffling generator's state at its start."""

    state: dict[str, Any] = field(default_factory=dict)

    def state_dict(self) -> dict[str, Any]:
        return self.state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = dict(state)


class _Run:
    def __init__(self, samples: int = 64, workers: int = 0) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 2))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01)
        data = torch.Generator().manual_seed(7)
        dataset = TensorDataset(torch.randn(samples, 4, generator=data), torch.randn(samples, 2, generator=data))
        self.shuffle = torch.Generator().manual_seed(1)
        self.loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, generator=self.shuffle, num_workers=workers)
        self.position = _Position({"epoch": 0, "batch": 0, "shuffle": self.shuffle.get_state()})
        self.step = 0

    def train(self, until: int, *, save: Path | None = None, skip: int = 0, epoch: int = 0) -> None:
        """Train to step `until`; the first epoch's first `skip` batches are drawn and not trained on."""
        while self.step < until:
            self.position.state = {"epoch": epoch, "batch": 0, "shuffle": self.shuffle.get_state()} if not skip else self.position.state
            for index, (x, y) in enumerate(self.loader):
                if index < skip:
                    continue
                self.optimizer.zero_grad()
                torch.nn.functional.mse_loss(self.model(x), y).backward()
                self.optimizer.step()
                self.step += 1
                self.position.state = {**self.position.state, "batch": index + 1, "step": self.step}
                if save is not None and self.step == SAVE_AT:
                    ckpt.save(save, model=self.model, optimizer=self.optimizer, data_position=self.position, loader=self.loader)
                if self.step == until:
                    return
            skip, epoch = 0, epoch + 1

    def restore(self, path: Path, **options: Any) -> ckpt.RestoreReport:
        return ckpt.restore(path, model=self.model, optimizer=self.optimizer, data_position=self.position, **options)

    def resume(self, path: Path, *, restore_shuffle: bool = True, **options: Any) -> ckpt.RestoreReport:
        """The loop's resume: the model, the optimizer, the generators and its place in the epoch."""
        report = self.restore(path, **options)
        if restore_shuffle:
            self.shuffle.set_state(self.position.state["shuffle"])
        self.step = self.position.state["step"]
        self.train(STEPS, skip=self.position.state["batch"], epoch=self.position.state["epoch"])
        return report


def _weights(run: _Run) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in run.model.parameters()])


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.Tensor]:
    """A run saved mid-epoch at step 11 and trained on to step 20; its final weights."""
    directory = tmp_path_factory.mktemp("run")
    run = _Run()
    run.train(STEPS, save=directory / "step-11.pt")
    return directory / "step-11.pt", _weights(run)


def test_the_save_records_the_next_batches_beside_the_checkpoint(saved: tuple[Path, torch.Tensor]) -> None:
    checkpoint, _ = saved
    record = json.loads(checkpoint.with_name("step-11.pt.next-batches-0.json").read_text())
    assert record["loader"] == {"samples": 64, "drawn_in_epoch": 3}
    assert len(record["batches"]) == 4 and all(len(batch["indices"]) == BATCH for batch in record["batches"])


def test_a_correct_resume_draws_the_same_batches_and_trains_bit_identically(saved: tuple[Path, torch.Tensor]) -> None:
    checkpoint, uninterrupted = saved
    run = _Run()
    report = run.resume(checkpoint, loader=run.loader)
    assert report.data_order is not None and report.data_order.status == "matched"
    assert torch.equal(_weights(run), uninterrupted)  # max |Δ| = 0


def test_the_next_save_records_what_the_resume_proved(saved: tuple[Path, torch.Tensor], tmp_path: Path) -> None:
    checkpoint, _ = saved
    proven, unmeasured_order = _Run(), _Run()
    proven.resume(checkpoint, loader=proven.loader)
    unmeasured_order.resume(checkpoint)
    for run, name in ((proven, "proven.pt"), (unmeasured_order, "without-loader.pt")):
        ckpt.save(tmp_path / name, model=run.model, optimizer=run.optimizer, data_position=run.position)
    parents = {name: load_manifest(tmp_path / f"{name}.ckptspec.yaml").lineage.parent for name in ("proven.pt", "without-loader.pt")}
    assert parents["proven.pt"].attested == ["data_order", "model", "optimizer", "rng"]
    assert parents["without-loader.pt"].attested == ["model", "optimizer"]  # the generators and batches were not watched


def test_a_sampler_not_put_back_mid_epoch_is_named_at_the_batch_it_shows(saved: tuple[Path, torch.Tensor]) -> None:
    checkpoint, uninterrupted = saved
    bug = _Run()
    bug.resume(checkpoint, restore_shuffle=False)
    assert not torch.equal(_weights(bug), uninterrupted)  # no error, another run

    caught = _Run()
    with pytest.raises(RestoreError, match=r"data order: .*batch 0 after the resume is not batch 0 after the save.*its sample 0 is index \d+, \d+ in the run"):
        caught.resume(checkpoint, restore_shuffle=False, loader=caught.loader)
    assert caught.step <= SAVE_AT + 4  # named within the first batches after the resume


def test_the_same_with_worker_processes(tmp_path: Path) -> None:
    run = _Run(workers=2)
    run.train(STEPS, save=tmp_path / "step-11.pt")
    correct = _Run(workers=2)
    assert correct.resume(tmp_path / "step-11.pt", loader=correct.loader).data_order.status == "matched"
    assert torch.equal(_weights(correct), _weights(run))
    bug = _Run(workers=2)
    with pytest.raises(RestoreError, match=r"data order: .*CRC32C [0-9a-f]{8}, [0-9a-f]{8} in the run"):
        bug.resume(tmp_path / "step-11.pt", restore_shuffle=False, loader=bug.loader)


def test_a_dataset_of_another_length_is_refused_before_loading(saved: tuple[Path, torch.Tensor]) -> None:
    checkpoint, uninterrupted = saved
    longer = _Run(samples=72)
    longer.resume(checkpoint)
    assert not torch.equal(_weights(longer), uninterrupted)

    caught = _Run(samples=72)
    fresh = _weights(caught)
    with pytest.raises(RestoreError, match="data order: the loader's dataset holds 72 samples, 64 when the run saved it"):
        caught.restore(checkpoint, loader=caught.loader)
    assert torch.equal(_weights(caught), fresh)  # nothing was loaded


@pytest.mark.parametrize(
    "after_restore",
    [lambda: torch.manual_seed(0), lambda: torch.rand(3)],
    ids=["re-seeded", "drawn-from"],
)
def test_a_generator_changed_after_the_restore_is_named_before_the_first_batch(
    saved: tuple[Path, torch.Tensor], after_restore: Callable[[], Any]
) -> None:
    checkpoint, uninterrupted = saved
    bug = _Run()
    bug.restore(checkpoint)
    after_restore()
    bug.shuffle.set_state(bug.position.state["shuffle"])
    bug.step = SAVE_AT
    bug.train(STEPS, skip=3, epoch=1)
    assert not torch.equal(_weights(bug), uninterrupted)  # dropout drew other masks

    caught = _Run()
    caught.restore(checkpoint, loader=caught.loader)
    after_restore()
    with pytest.raises(RestoreError, match="rng: the state of the torch generator changed between the restore and the first batch"):
        iter(caught.loader)
    assert caught.step == 0


def _warm_restart(optimizer: torch.optim.Optimizer) -> None:
    """Adam's moments back to zero, its step counts kept: a "warm restart" some loops make on resume."""
    for state in optimizer.state.values():
        state["exp_avg"].zero_()
        state["exp_avg_sq"].zero_()


def test_optimizer_moments_reset_after_the_restore_are_named_before_the_first_batch(saved: tuple[Path, torch.Tensor]) -> None:
    checkpoint, uninterrupted = saved
    bug = _Run()
    bug.restore(checkpoint)
    _warm_restart(bug.optimizer)
    bug.shuffle.set_state(bug.position.state["shuffle"])
    bug.step = SAVE_AT
    bug.train(STEPS, skip=3, epoch=1)
    assert not torch.equal(_weights(bug), uninterrupted)  # no error, another run

    caught = _Run()
    caught.restore(checkpoint, loader=caught.loader)
    _warm_restart(caught.optimizer)
    found = r"optimizer 0 param group 0: the state of '0.weight' before the first step is not the one saved .*: its moments are all zeros, as a new optimizer's are; 3 more of the 4"
    with pytest.raises(RestoreError, match=found):
        iter(caught.loader)
    assert caught.step == 0


class _SettingsOnly(torch.optim.Adam):
    """Loads the saved settings and none of the state: a subclass meant to take only the learning rate."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict({**state_dict, "state": {}})


def test_an_optimizer_whose_load_drops_its_state_is_refused_by_the_restore(tmp_path: Path) -> None:
    run = _Run()
    run.optimizer = _SettingsOnly(run.model.parameters(), lr=0.01)
    run.train(SAVE_AT, save=tmp_path / "step-11.pt")
    plain = _SettingsOnly(_Run().model.parameters(), lr=0.01)
    plain.load_state_dict(torch.load(tmp_path / "step-11.pt", weights_only=True)["optimizers"][0])
    assert plain.state == {} and plain.param_groups[0]["lr"] == 0.01, "loaded without an error, Adam starts again at step 1"

    resumed = _Run()
    resumed.optimizer = _SettingsOnly(resumed.model.parameters(), lr=0.01)
    with pytest.raises(RestoreError, match=r"optimizer 0: it holds 0 state tensors before the first step, 12 when saved: its state was not restored"):
        resumed.restore(tmp_path / "step-11.pt")


def test_a_resume_with_nothing_to_check_against_says_so(tmp_path: Path) -> None:
    run = _Run()
    run.train(SAVE_AT + 2, save=tmp_path / "step-11.pt")  # stopped two batches after the save
    assert not tmp_path.joinpath("step-11.pt.next-batches-0.json").exists()
    resumed = _Run()
    with pytest.warns(ckpt.RestoreNote, match="data order not checked: no record of the batches drawn after it was saved"):
        report = resumed.restore(tmp_path / "step-11.pt", loader=resumed.loader)
    assert report.data_order is not None and report.data_order.status == "unchecked"


def test_a_checkpoint_saved_again_at_its_path_gets_a_record_of_its_own_batches(tmp_path: Path) -> None:
    run = _Run()
    last = tmp_path / "last.pt"
    for until in (5, 6, 12):  # the save at 5 is replaced before its 4 batches are drawn
        run.train(until)
        ckpt.save(last, model=run.model, optimizer=run.optimizer, data_position=run.position, loader=run.loader)
    run.train(17)
    record = json.loads(tmp_path.joinpath("last.pt.next-batches-0.json").read_text())
    assert record["loader"]["drawn_in_epoch"] == 6  # each `train` draws a new epoch: the save at 12 came 6 batches in
    assert record["manifest_sha256"] == hashlib.sha256(tmp_path.joinpath("last.pt.ckptspec.yaml").read_bytes()).hexdigest()


def test_a_damaged_record_is_named(saved: tuple[Path, torch.Tensor], tmp_path: Path) -> None:
    checkpoint, _ = saved
    for name in ("step-11.pt", "step-11.pt.ckptspec.yaml"):
        tmp_path.joinpath(name).write_bytes(checkpoint.with_name(name).read_bytes())
    tmp_path.joinpath("step-11.pt.next-batches-0.json").write_text('{"format": "ckptspec.next-batches", "version": 1}')
    run = _Run()
    with pytest.raises(RestoreError, match=r"step-11.pt.next-batches-0.json: not a record of the batches drawn after a save"):
        run.restore(tmp_path / "step-11.pt", loader=run.loader)


def test_the_record_is_a_companion_of_the_checkpoint_for_audit(saved: tuple[Path, torch.Tensor]) -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, ["audit", str(saved[0].parent), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "next-batches" not in result.output


def test_loader_takes_a_data_loader(tmp_path: Path) -> None:
    run = _Run()
    with pytest.raises(AdapterError, match="loader= takes the torch.utils.data.DataLoader"):
        ckpt.save(tmp_path / "x.pt", model=run.model, loader=[1, 2])
    assert not (tmp_path / "x.pt").exists()


class _RunsCode:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, ("true",)


def test_a_pickle_under_a_records_name_is_judged_not_passed_over(saved: tuple[Path, torch.Tensor], tmp_path: Path) -> None:
    from click.testing import CliRunner

    checkpoint, _ = saved
    for name in ("step-11.pt", "step-11.pt.ckptspec.yaml"):
        tmp_path.joinpath(name).write_bytes(checkpoint.with_name(name).read_bytes())
    tmp_path.joinpath("step-11.pt.next-batches-0.json").write_bytes(pickle.dumps(_RunsCode(), protocol=2))
    result = CliRunner().invoke(cli, ["audit", str(tmp_path), "--format", "json"])
    assert result.exit_code == 1, result.output
    assert "step-11.pt.next-batches-0.json" in result.output and "CKS401" in result.output


def _copied(saved: tuple[Path, torch.Tensor], directory: Path) -> Path:
    for name in ("step-11.pt", "step-11.pt.ckptspec.yaml"):
        directory.joinpath(name).write_bytes(saved[0].with_name(name).read_bytes())
    return directory / "step-11.pt"


@pytest.mark.parametrize(
    ("record", "named"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ("x" * ((1 << 20) + 1), "bytes, more than the"),
        ('{"format": "ckptspec.next-batches", "version": 1, "manifest_sha256": "", "loader": {"samples": 64, "drawn_in_epoch": '
         + "9" * 5000 + '}, "batches": [{"crc32c": "00000000", "indices": null}]}', "not a record of the batches drawn after a save"),
        ('{"format": "ckptspec.next-batches", "version": 1, "manifest_sha256": "", "loader": {"samples": 64, "drawn_in_epoch": 65}, '
         '"batches": [{"crc32c": "00000000", "indices": null}]}', "65 batches drawn in an epoch of 64 samples"),
    ],
    ids=["deep", "huge", "long-number", "count-beyond-the-data"],
)
def test_a_hostile_record_is_refused_naming_it(saved: tuple[Path, torch.Tensor], tmp_path: Path, record: str, named: str) -> None:
    checkpoint = _copied(saved, tmp_path)
    tmp_path.joinpath("step-11.pt.next-batches-0.json").write_text(record)
    run = _Run()
    with pytest.raises(RestoreError, match=re.escape(named)):
        run.restore(checkpoint, loader=run.loader)


def test_a_fifo_in_a_records_place_is_refused_without_waiting(saved: tuple[Path, torch.Tensor], tmp_path: Path) -> None:
    checkpoint = _copied(saved, tmp_path)
    os.mkfifo(tmp_path / "step-11.pt.next-batches-0.json")
    run = _Run()
    with pytest.raises(RestoreError, match="not a regular file but a FIFO"):
        run.restore(checkpoint, loader=run.loader)
