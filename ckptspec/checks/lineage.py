"""The run ledger's rules (`ckptspec lineage`, `audit --lineage`): each concerns two checkpoints of
one run, the one reported and the one it is measured against, which its message names. The graph
and the judging live in `ckptspec.lineage`."""

from __future__ import annotations

from ._registry import declare

__all__ = [
    "DataCursorOutOfStep",
    "LineageInferred",
    "OptimizerOutOfStep",
    "OptimizerReinitialised",
    "ParentMissing",
    "ParentReplaced",
    "ResumeUnproven",
    "RngReseeded",
    "Rollback",
    "ScalerReset",
    "SchedulerOutOfStep",
    "StartedFromOtherRun",
    "StepNotAdvancing",
    "UndeclaredFork",
]


@declare("CKS501", "parent-missing", family="lineage", severity="error")
class ParentMissing:
    """## What it does
    Reports a hole in a run's chain: a checkpoint whose recorded parent is neither judged nor on
    disk, while an earlier checkpoint of the same run is.

    The parent is the checkpoint its process resumed from, or the previous save of the same process.

    A parent that comes before every judged checkpoint of its run is reported as `info`: a retention
    that keeps the newest checkpoints (the Trainer's `save_total_limit`, `ModelCheckpoint`'s
    `save_top_k` without a monitor) removes a run's first checkpoints, and the chain is shown from
    the earliest one kept. So is one a retention by a metric removed (`save_top_k` with a monitor,
    the Trainer's best model with `metric_for_best_model`), which keeps its best checkpoints
    however old: the adapters record the retention in each manifest (`lineage.retention`), and no
    more of the run's judged checkpoints than it keeps as best come before the missing parent.

    ## Why is this bad?
    What happened between the checkpoint before the hole and this one, and whether a resume there
    continued the run, is unknowable.

    ## Example
    `run/step-6.pt` names `step-4.pt` as its parent, and `step-4.pt` was deleted, while `step-2.pt`
    is still there, and the run's manifests record no retention that keeps `step-2.pt` as its best.

    ## How to fix
    Judge the directory that holds the parent too, or keep the run's checkpoints together. A
    checkpoint begun from another run's weights on purpose is a fork: declare it
    (`ckptspec.torch.restore(..., fork=True)`).
    """


@declare("CKS502", "parent-replaced", family="lineage", severity="error")
class ParentReplaced:
    """## What it does
    Reports a checkpoint whose parent's manifest is not the one it recorded (its SHA-256 differs), and
    no other judged checkpoint holds the parent's model state under the recorded run and place.

    A `last.ckpt` written again at every save is not reported: its earlier state is found under its
    own name (by the parent's model state digest).

    ## Why is this bad?
    The parent was replaced or edited after this checkpoint was made from it: another run's file
    copied over it, a checkpoint written again by a resumed run, a manifest edited by hand. The
    file there now is not what the run continued from.

    ## Example
    A run resumed from `step-2.pt` writes `step-3.pt` again; the old `step-4.pt` still names the
    old `step-3.pt`.

    ## How to fix
    Find which file is the run's: restore the replaced one from a backup, or judge the run without
    the checkpoints that continued from it.
    """


@declare("CKS503", "undeclared-fork", family="lineage", severity="error")
class UndeclaredFork:
    """## What it does
    Reports a checkpoint that is the second child of one parent within one run, where no newer
    checkpoint of the run existed when its process resumed (else it is a rollback, CKS504). The
    moment of the resume is in the child's manifest (`lineage.parent.resumed_ns`); a manifest
    written before that field existed is judged by when the child was written.

    ## Why is this bad?
    Two processes continued the same checkpoint under one run id: the run has two histories, and
    which one the final model belongs to is a guess.

    ## Example
    Two jobs started from `step-4.pt` at the same time after a preemption, each writing `step-6.pt`
    in its own directory.

    ## How to fix
    Declare a deliberate branch as a fork (`restore(..., fork=True)`, a new run id), or keep one of
    the two histories.
    """


@declare("CKS504", "resume-rollback", family="lineage", severity="error")
class Rollback:
    """## What it does
    Reports a checkpoint whose process resumed from a checkpoint older than the newest one its run
    had already saved at the moment of the resume.

    ## Why is this bad?
    The steps between the two were trained and then thrown away, or are trained again from an older
    state: checkpoints named by step now come from two histories, and later ones may overwrite the
    discarded ones.

    ## Example
    A job resumes from `step-2.pt` (a hard-coded path) while `step-4.pt` of the same run exists.

    ## How to fix
    Resume from the run's newest checkpoint (`last.ckpt`, `CheckpointManager.latest_checkpoint`), or
    declare the restart from an older checkpoint as a fork.
    """


@declare("CKS505", "step-not-advancing", family="lineage", severity="error")
class StepNotAdvancing:
    """## What it does
    Reports a checkpoint whose global step is equal to or lower than its parent's within one run.

    ## Why is this bad?
    A global step that restarts after a resume (a counter kept outside the saved state, or reset by
    the training code) makes later checkpoints overwrite earlier ones of the same name, and
    everything keyed by step (schedules, logging, evaluation) restarts with it.

    ## Example
    `global_step = 0` after `restore(...)`, so the run's next save is `step-2.pt` again.

    ## How to fix
    Restore the step from the checkpoint (`DataPosition`, `trainer.global_step`, the optimizer's
    `iterations`) instead of setting it.
    """


@declare("CKS506", "started-from-other-run", family="lineage", severity="error")
class StartedFromOtherRun:
    """## What it does
    Reports a run's first checkpoint whose model, when training began, held exactly the state of a
    checkpoint of another run (its recorded start digest), without a parent or a declared fork.

    ## Why is this bad?
    Loading weights and then training (Lightning's `load_from_checkpoint` then `fit()` without
    `ckpt_path`) is neither a resume nor a declared fork: the optimizer, scheduler, step and data
    position start over while the weights do not, and the run claims to start from scratch.

    ## Example
    `model = Model.load_from_checkpoint("run/last.ckpt"); trainer.fit(model)` writing into `run/`.

    ## How to fix
    Resume with `trainer.fit(model, ckpt_path=...)`, or declare the fine-tune as a fork.
    """


@declare("CKS507", "scheduler-out-of-step", family="lineage", severity="error")
class SchedulerOutOfStep:
    """## What it does
    Reports a checkpoint whose scheduler step count (`last_epoch`) did not advance from its parent's
    in the proportion the run showed before.

    It fell back (a scheduler built anew and not restored), or it advanced twice or not at all per
    global step.

    The step count, not the rate, is compared: a fresh `StepLR` keeps the optimizer's current
    learning rate, so the rate alone can look continuous while the schedule restarted.

    ## Why is this bad?
    The rest of the run follows another schedule than the one it was planned with: warm-up again,
    a decay that comes late or twice.

    ## Example
    `scheduler = StepLR(optimizer, 10)` after a resume, without `scheduler.load_state_dict(...)`.

    ## How to fix
    Restore the scheduler with the rest of the state, and step it once per optimizer step (or per
    epoch) as before the resume.
    """


@declare("CKS508", "optimizer-reinitialised", family="lineage", severity="error")
class OptimizerReinitialised:
    """## What it does
    Reports a checkpoint whose optimizer step count (Adam's `step`, TensorFlow's `iterations`) is
    lower than its parent's: the optimizer started over.

    ## Why is this bad?
    Its moments are fresh and its bias correction restarts: the first steps after the resume are far
    larger than the run's, which often shows as a loss spike, sometimes as divergence.

    ## Example
    `optimizer = Adam(model.parameters())` built again after `optimizer.load_state_dict(...)`.

    ## How to fix
    Build the optimizer once, restore its state, and keep using that object.
    """


@declare("CKS509", "optimizer-out-of-step", family="lineage", severity="error")
class OptimizerOutOfStep:
    """## What it does
    Reports a checkpoint whose optimizer step count advanced from its parent's by another amount than
    the global step implies.

    The proportion is the run's own before (one optimizer step per global step, or one per `k` with
    gradient accumulation).

    ## Why is this bad?
    The optimizer took more or fewer steps than the training loop counted: gradient accumulation
    changed on resume, or an optimizer was stepped that the loop does not know of.

    ## Example
    `accumulate_grad_batches=4` before the resume and 1 after it.

    ## How to fix
    Resume with the settings the run was saved with; change them as a declared fork.
    """


@declare("CKS510", "rng-reseeded", family="lineage", severity="error")
class RngReseeded:
    """## What it does
    Reports a checkpoint holding a random generator state (per rank and generator) equal to one an
    earlier checkpoint along its parents held, its parent holding another. A checkpoint of another
    branch with the same state (a rollback that replays the run exactly) is not one.

    ## Why is this bad?
    A resume that seeds the generators (`seed_everything` after the restore) instead of restoring
    them replays the random numbers of the run's start: the same dropout masks, the same shuffles,
    the same augmentations, again.

    ## Example
    `ckpt.restore(...); lightning.seed_everything(0)`.

    ## How to fix
    Restore the generators from the checkpoint (`restore(..., rng=True)`), and seed only at a run's start.
    """


@declare("CKS511", "data-cursor-out-of-step", family="lineage", severity="error")
class DataCursorOutOfStep:
    """## What it does
    Reports a checkpoint whose data position moved back from its parent's, or forward by another
    amount than the global steps between them imply.

    The position is the samples seen, else the epoch and the batch within it; the proportion is the
    run's own samples per step before.

    ## Why is this bad?
    The run trains on some data twice and never on other data: the epoch is replayed, or a part of
    it skipped, silently.

    ## Example
    A data loader started at the epoch's beginning after a resume in the middle of the epoch.

    ## How to fix
    Restore the data position (and the sampler's epoch and seed) and skip what the run already consumed.
    """


@declare("CKS512", "scaler-reset", family="lineage", severity="error")
class ScalerReset:
    """## What it does
    Reports a checkpoint whose gradient scaler is back at its initial state.

    Its growth tracker fell back while the scale did not change, or the scale returned to the run's
    first value with no step skipped since, although the parent's had moved from it.

    ## Why is this bad?
    A fresh `GradScaler` starts at its initial scale again (65536 by default): the first steps after
    the resume overflow and are skipped until the scale has fallen back to where it was.

    ## Example
    `scaler = torch.amp.GradScaler()` after a resume, without `scaler.load_state_dict(...)`.

    ## How to fix
    Save and restore the scaler with the rest of the state.
    """


@declare("CKS513", "lineage-inferred", family="lineage", severity="info")
class LineageInferred:
    """## What it does
    Lists a checkpoint whose manifest records no lineage, so that its parent is inferred.

    Such a checkpoint was written without ckptspec (and is read as adoption reads it), or before
    schema 1.2. Its parent is taken to be the checkpoint written before it in its directory (by the
    files' modification times, then by global step).

    ## Why is this bad?
    It is not in itself. Without recorded lineage a swapped or edited parent, a fork and a rollback
    cannot be shown; the counters (steps, schedules, generators) are still compared.

    ## Example
    A directory of Lightning `.ckpt` files from a run trained without the ckptspec callback.

    ## How to fix
    Save with a ckptspec adapter (the manifest then records the run and the parent).
    """


@declare("CKS514", "resume-unproven", family="lineage", severity="info")
class ResumeUnproven:
    """## What it does
    Lists the first checkpoint saved after a resume that its manifest does not record as proven.

    Either nothing was measured of what the resume restored, or its first batches were not
    compared with the ones the run drew after the checkpoint it resumed from.

    A ckptspec adapter measures the live optimizer, scheduler, scaler, generators and model after a
    restore, before the first step, and records what it found as saved in the manifest's
    `lineage.parent.attested`; `data_order` joins it once the resumed run's first batches were the
    run's. A manifest written before ckptspec measured resumes records nothing, and a resume whose
    checkpoint has no record of the batches drawn after it (the run stopped within them) or whose
    adapter does not digest batches (TensorFlow, Keras) records no `data_order`.

    ## Why is this bad?
    It is not in itself: each resume that was measured passed, since a failed measurement stops the
    run. An operator who admits only proven resumes learns which were not.

    ## Example
    A run resumed from a checkpoint saved two batches before the job was preempted: its record of
    the next batches was never complete.

    ## How to fix
    Hand the loop's loader to `save` and `restore` (plain PyTorch), and save through a ckptspec
    adapter; keep `components.data_position.next_batches` above 0.
    """
