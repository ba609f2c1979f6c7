"""What `audit` finds beside the checkpoints it judges: state files that point elsewhere, and files
it does not judge and why.
"""

from __future__ import annotations

from ._registry import declare

__all__ = ["FormatNotJudged", "FileSkipped", "StatePointerDangling", "StatePointerEscapes"]


@declare("CKS013", "state-pointer-escapes", family="input", severity="error")
class StatePointerEscapes:
    """## What it does
    Reports a TensorFlow `checkpoint` state file that names a checkpoint outside the audited paths.

    The pointer (an absolute path, or one that climbs out with `..`) is never followed.

    ## Why is this bad?
    Following it would judge, and report as present, a checkpoint that is not part of the upload;
    `tf.train.latest_checkpoint` would restore that other checkpoint instead of the one shipped.

    ## Example
    `run/checkpoint` containing `model_checkpoint_path: "/home/alice/old-run/ckpt-9"`.

    ## How to fix
    Write the state file with paths relative to its directory (`tf.train.CheckpointManager` does),
    or delete it and name the checkpoint prefix directly.
    """


@declare("CKS014", "state-pointer-dangling", family="input", severity="warning")
class StatePointerDangling:
    """## What it does
    Reports a TensorFlow `checkpoint` state file that names a checkpoint whose `.index` file does
    not exist, once per state file.

    ## Why is this bad?
    `tf.train.latest_checkpoint` returns nothing or fails, so a resume silently starts from scratch.

    ## Example
    `model_checkpoint_path: "ckpt-12"` in a directory holding only `ckpt-10.index`.

    ## How to fix
    Copy the missing checkpoint, or write the state file again from the checkpoints that are there.
    """


@declare("CKS015", "file-skipped", family="input", severity="info")
class FileSkipped:
    """## What it does
    Lists a file under an audited path that is not judged, and why.

    Its content is no format a checkpoint loader reads, or a format that holds no code
    (safetensors, a NumPy array), or it is a symbolic link to a directory, which is not followed
    unless `--follow-symlinks` is given.

    ## Why is this bad?
    It is not: the finding exists so that nothing under an audited path is passed over without a word.

    ## Example
    `run/metrics.csv: no checkpoint format recognised by its content; no loader unpickles it`.

    ## How to fix
    Nothing to fix. Pass `--follow-symlinks` to search linked directories too.
    """


@declare("CKS016", "format-not-judged", family="input", severity="error")
class FormatNotJudged:
    """## What it does
    Reports a file in a format whose usual loader can run code from it, which ckptspec cannot judge yet.

    Such is a torch preview-release archive (`PYTORCH1`). The file's name plays no part: content
    decides. Containers of pickles (NumPy object arrays, compressed streams, zips, tars) are opened
    and judged instead, or refused as not inspectable (CKS405).

    ## Why is this bad?
    What cannot be judged cannot be said to be safe to load.

    ## Example
    `model.pt: a torch preview-release archive (PYTORCH1)`.

    ## How to fix
    Convert the file to a format ckptspec judges (a torch zip archive, safetensors, a TensorFlow
    bundle), or remove it from the upload.
    """
