"""Each trap loads without error in plain torch; `ckptspec.torch.restore` must name its cause."""

from __future__ import annotations

import copy
import re

import pytest

torch = pytest.importorskip("torch")

import ckptspec.torch as ckpt  # noqa: E402
from ckptspec import AdapterError, RestoreError, Spec  # noqa: E402

from ._tiny import Net, seed_everything, train_step  # noqa: E402


def _spec(**components: dict) -> Spec:
    return Spec.model_validate({"name": "tiny", "components": components})


def _near_constant_channels(model: Net) -> None:
    """Running variances from 1e-5 to 1: a trained net with a few almost constant channels."""
    with torch.no_grad():
        model.bn.running_var.copy_(torch.logspace(-5, 0, 8))
        model.bn.running_mean.uniform_(-1, 1)


def test_batchnorm_eps_loads_silently_in_torch_and_is_named_by_restore(tmp_path, fixed_batch):
    seed_everything(0)
    saved = Net(eps=1e-3)
    _near_constant_channels(saved)
    ckpt.save(tmp_path / "bn.pt", model=saved, fingerprint_batch=fixed_batch)

    rebuilt = Net(eps=1e-5)
    result = rebuilt.load_state_dict(torch.load(tmp_path / "bn.pt", weights_only=True)["model"])
    assert not result.missing_keys and not result.unexpected_keys
    drift = (rebuilt.eval()(fixed_batch) - saved.eval()(fixed_batch)).abs().max().item()
    assert drift > 1.0  # the trap: a silent load, and outputs far apart

    with pytest.raises(RestoreError) as caught:
        ckpt.restore(tmp_path / "bn.pt", model=Net(eps=1e-5))
    assert "module 'bn' (BatchNorm1d): eps is 1e-05 in the model being restored, 0.001 when saved" in str(caught.value)


def test_fingerprint_alone_catches_the_eps_when_config_checks_are_waived(tmp_path, fixed_batch):
    seed_everything(0)
    saved = Net(eps=1e-3)
    _near_constant_channels(saved)
    ckpt.save(tmp_path / "bn.pt", model=saved, fingerprint_batch=fixed_batch)

    with pytest.raises(RestoreError) as caught:
        ckpt.restore(tmp_path / "bn.pt", model=Net(eps=1e-5), spec=_spec(config={"ignore": ["*.eps"]}, rng={"require": "optional"}, data_position={"require": "optional"}, optimizer={"require": "optional"}))
    message = str(caught.value)
    assert "fingerprint: output 'output' differs from the saved one by up to" in message
    assert "eps" not in message


def _shape_filtering_loader(model: torch.nn.Module, state: dict) -> None:
    """The loader people write around torch's shape error: keep what matches, drop the rest."""
    current = model.state_dict()
    model.load_state_dict({k: v for k, v in state.items() if k in current and current[k].shape == v.shape}, strict=False)


def test_resized_head_skipped_by_a_shape_filtering_loader_is_reported(tmp_path, fixed_batch):
    seed_everything(0)
    saved = Net(classes=3)
    ckpt.save(tmp_path / "head.pt", model=saved, fingerprint_batch=fixed_batch)
    saved_state = saved.state_dict()

    resized = Net(classes=5)
    _shape_filtering_loader(resized, torch.load(tmp_path / "head.pt", weights_only=True)["model"])
    kept = [name for name, tensor in resized.state_dict().items() if name in saved_state and torch.equal(tensor, saved_state[name])]
    assert "head.weight" not in kept and "features.weight" in kept  # the trap: the head silently stayed random

    with pytest.raises(RestoreError) as caught:
        ckpt.restore(tmp_path / "head.pt", model=Net(classes=5), model_loader=_shape_filtering_loader)
    assert "module 'head' (Linear): out_features is 5 in the model being restored, 3 when saved" in str(caught.value)

    head_config_waived = _spec(config={"ignore": ["head.*"]}, optimizer={"require": "optional"}, data_position={"require": "optional"})
    with pytest.raises(RestoreError) as caught:
        ckpt.restore(tmp_path / "head.pt", model=Net(classes=5), model_loader=_shape_filtering_loader, spec=head_config_waived)
    message = str(caught.value)
    assert f"model: {len(saved_state) - 2} of {len(saved_state)} saved tensors were loaded" in message
    assert "head.weight (saved float32 [3, 8], model float32 [5, 8])" in message
    assert "head.bias (saved float32 [3], model float32 [5])" in message


def test_a_new_head_passes_when_the_spec_allows_it(tmp_path, fixed_batch):
    seed_everything(0)
    ckpt.save(tmp_path / "head.pt", model=Net(classes=3), fingerprint_batch=fixed_batch)
    fine_tuning = _spec(model={"allow_missing": ["head.*"]}, config={"ignore": ["head.*"]}, optimizer={"require": "optional"}, data_position={"require": "optional"})

    report = ckpt.restore(tmp_path / "head.pt", model=Net(classes=5), spec=fine_tuning)

    assert report.left_fresh == ("head.weight", "head.bias")
    assert report.tensors_loaded == report.tensors_saved - 2
    assert not report.fingerprint_replayed  # a new head cannot reproduce the old outputs


def _trained_adam(tmp_path, fixed_batch, lr: float = 1e-2):
    seed_everything(0)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(3):
        train_step(model, optimizer)
    ckpt.save(tmp_path / "adam.pt", model=model, optimizer=optimizer, data_position=ckpt.DataPosition(global_step=3), fingerprint_batch=fixed_batch)
    return model


def test_adam_built_with_a_new_lr_is_refused_without_an_explicit_override(tmp_path, fixed_batch):
    _trained_adam(tmp_path, fixed_batch)
    checkpoint = ckpt.load(tmp_path / "adam.pt")

    plain = Net()
    plain_optimizer = torch.optim.Adam(plain.parameters(), lr=1e-3)
    plain_optimizer.load_state_dict(checkpoint.state["optimizers"][0])
    assert plain_optimizer.param_groups[0]["lr"] == 1e-2  # the trap: the saved rate silently won

    model = Net()
    with pytest.raises(RestoreError) as caught:
        ckpt.restore(checkpoint, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=1e-3), data_position=ckpt.DataPosition())
    assert "optimizer 0 param group 0: lr is 0.001 in the optimizer being restored, 0.01 when saved" in str(caught.value)


def test_lr_override_is_applied_after_loading_and_shares_no_memory_with_the_checkpoint(tmp_path, fixed_batch):
    _trained_adam(tmp_path, fixed_batch)
    checkpoint = ckpt.load(tmp_path / "adam.pt")
    pristine = copy.deepcopy(checkpoint.state["optimizers"][0]["state"])

    plain = Net()
    plain_optimizer = torch.optim.Adam(plain.parameters(), lr=1e-2)
    plain.load_state_dict(checkpoint.state["model"])
    shared = copy.deepcopy(checkpoint.state)
    plain_optimizer.load_state_dict(shared["optimizers"][0])
    for _ in range(3):
        train_step(plain, plain_optimizer)
    assert not torch.equal(shared["optimizers"][0]["state"][0]["exp_avg"], pristine[0]["exp_avg"])  # the trap

    def resume() -> tuple[Net, torch.optim.Adam, ckpt.RestoreReport]:
        model = Net()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        report = ckpt.restore(checkpoint, model=model, optimizer=optimizer, data_position=ckpt.DataPosition(), overrides={"lr": 1e-3})
        return model, optimizer, report

    model, optimizer, report = resume()
    first_moments = copy.deepcopy(optimizer.state_dict()["state"])
    assert optimizer.param_groups[0]["lr"] == 1e-3
    assert report.changes == (ckpt.HyperparameterChange(optimizer=0, group=0, name="lr", saved=1e-2, applied=1e-3),)
    for _ in range(3):
        train_step(model, optimizer)
    assert all(torch.equal(checkpoint.state["optimizers"][0]["state"][i]["exp_avg"], pristine[i]["exp_avg"]) for i in pristine)

    _, second, _ = resume()
    assert all(torch.equal(second.state_dict()["state"][i]["exp_avg"], first_moments[i]["exp_avg"]) for i in first_moments)


def test_override_outside_the_spec_is_refused(tmp_path, fixed_batch):
    _trained_adam(tmp_path, fixed_batch)
    model = Net()
    # A refused override is a wrong argument, raised up front by the validation all adapters share.
    with pytest.raises(AdapterError, match=re.escape("overrides ['weight_decay'] are not overridable")):
        ckpt.restore(tmp_path / "adam.pt", model=model, optimizer=torch.optim.Adam(model.parameters(), lr=1e-2), data_position=ckpt.DataPosition(), overrides={"weight_decay": 0.1})


def test_optimizer_with_parameters_in_another_order_or_grouping_is_detected(tmp_path, fixed_batch):
    _trained_adam(tmp_path, fixed_batch)
    model = Net()
    reordered = torch.optim.Adam(list(model.parameters())[::-1], lr=1e-2)
    with pytest.raises(RestoreError) as caught:
        ckpt.restore(tmp_path / "adam.pt", model=model, optimizer=reordered, data_position=ckpt.DataPosition())
    assert "param group 0 position 0 is 'head.bias' [3] in the optimizer being restored, 'features.weight' [8, 4] when saved" in str(caught.value)

    head = set(model.head.parameters())
    grouped = torch.optim.Adam(
        [{"params": [p for p in model.parameters() if p not in head]}, {"params": list(model.head.parameters())}], lr=1e-2
    )
    with pytest.raises(RestoreError, match=re.escape("parameters are grouped differently: group sizes [4, 2] in the optimizer being restored, [6] when saved")):
        ckpt.restore(tmp_path / "adam.pt", model=model, optimizer=grouped, data_position=ckpt.DataPosition())


def _cosine_run(steps: int) -> tuple[Net, torch.optim.SGD, torch.optim.lr_scheduler.CosineAnnealingLR]:
    model = Net(dropout=0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=1000)
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
    return model, optimizer, scheduler


def test_cosine_schedule_resumed_without_its_scheduler(tmp_path):
    _, uninterrupted, _ = _cosine_run(600)
    planned = uninterrupted.param_groups[0]["lr"]
    model, optimizer, scheduler = _cosine_run(500)
    spec = _spec(scheduler={"require": "required"}, data_position={"require": "optional"}, fingerprint={"require": "optional"})
    ckpt.save(tmp_path / "cos.pt", model=model, optimizer=optimizer, scheduler=scheduler, spec=spec)

    plain = Net(dropout=0.0)
    plain_optimizer = torch.optim.SGD(plain.parameters(), lr=0.1)
    plain_optimizer.load_state_dict(torch.load(tmp_path / "cos.pt", weights_only=True)["optimizers"][0])
    restarted = torch.optim.lr_scheduler.CosineAnnealingLR(plain_optimizer, T_max=1000)
    for _ in range(100):
        plain_optimizer.step()
        restarted.step()
    assert plain_optimizer.param_groups[0]["lr"] != planned  # the trap: a new curve, silently

    fresh = Net(dropout=0.0)
    with pytest.raises(RestoreError) as caught:
        ckpt.restore(tmp_path / "cos.pt", model=fresh, optimizer=torch.optim.SGD(fresh.parameters(), lr=0.1))
    assert (
        "scheduler: the checkpoint holds CosineAnnealingLR at step 500 and spec 'tiny' requires it to be restored, "
        "but the restore was given none"
    ) in str(caught.value)

    resumed_optimizer = torch.optim.SGD(fresh.parameters(), lr=0.1)
    resumed_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(resumed_optimizer, T_max=1000)
    ckpt.restore(tmp_path / "cos.pt", model=fresh, optimizer=resumed_optimizer, scheduler=resumed_scheduler)
    for _ in range(100):
        resumed_optimizer.step()
        resumed_scheduler.step()
    assert resumed_optimizer.param_groups[0]["lr"] == planned


def test_override_under_keras_name_is_applied_as_lr(tmp_path, fixed_batch):
    _trained_adam(tmp_path, fixed_batch)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    report = ckpt.restore(tmp_path / "adam.pt", model=model, optimizer=optimizer, data_position=ckpt.DataPosition(), overrides={"learning_rate": 1e-3})
    assert [(change.name, change.applied) for change in report.changes] == [("lr", 1e-3)]
    assert optimizer.param_groups[0]["lr"] == 1e-3


@pytest.mark.parametrize(
    ("with_optimizer", "problem"),
    [(True, "overrides ['bogus'] name no setting of the optimizer"), (False, "overrides ['bogus'] given, but there is no optimizer")],
)
def test_unknown_override_or_one_without_an_optimizer_is_refused(tmp_path, fixed_batch, with_optimizer, problem):
    _trained_adam(tmp_path, fixed_batch)
    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2) if with_optimizer else None
    with pytest.raises(AdapterError, match=re.escape(problem)):
        ckpt.restore(tmp_path / "adam.pt", model=model, optimizer=optimizer, data_position=ckpt.DataPosition(), overrides={"bogus": 1})
