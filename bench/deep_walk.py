"""Whole-process benchmark of walks over deeply nested, untrusted structure: time per nesting depth.

    python bench/deep_walk.py                     # write the files if absent, time each command 3 times
    python bench/deep_walk.py --code DIR          # the same with the ckptspec package found in DIR
                                                  #   (a checkout of another commit: before/after)

Files, each generated here by bytes (no writer nests this deep without recursing):
    hparams-D.ckpt  a Lightning-shaped torch archive whose hyper-parameters nest D dicts deep
    lists-D.pkl     a bare pickle of lists nested D deep

Each figure is a whole process (`ckptspec inspect`, `validate`, `manifest --force`), the median of 3
runs (`--runs`), with a time limit of 120 s; time linear in the file shows as a constant seconds-per-level.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DIRECTORY = Path(tempfile.gettempdir()) / "ckptspec-bench" / "deep-walk"
DEPTHS = (100_000, 400_000, 800_000)
RUNS = 3
_CLI = "import sys; from ckptspec.cli import main; main(sys.argv[1:])"
LIMIT_SECONDS = 120


def _text(value: str) -> bytes:
    encoded = value.encode()
    return b"\x8c" + bytes([len(encoded)]) + encoded  # SHORT_BINUNICODE


def write_hparams(path: Path, depth: int) -> None:
    """A torch archive as torch's own writer lays it out, whose data.pkl is a Lightning checkpoint
    with `hyper_parameters = {"cfg": {"k": {"k": ...}}}` nested `depth` dicts deep."""
    import torch

    nested = b"}" + (_text("k") + b"}") * depth + b"s" * depth
    entries = [("pytorch-lightning_version", _text("2.6.6")), ("epoch", b"K\x00"), ("global_step", b"K\x04"),
               ("state_dict", b"}"), ("hyper_parameters", b"}" + _text("cfg") + nested + b"s"), ("hparams_name", _text("kwargs")),
               ("optimizer_states", b"]"), ("lr_schedulers", b"]"), ("loops", b"}"), ("callbacks", b"}")]  # fmt: skip
    body = b"\x80\x02}(" + b"".join(_text(key) + value for key, value in entries) + b"u."
    writer = torch._C.PyTorchFileWriter(str(path))
    writer.write_record("data.pkl", body, len(body))
    writer.write_record("byteorder", b"little", 6)
    writer.write_end_of_file()


def write_lists(path: Path, depth: int) -> None:
    path.write_bytes(b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b".")


def _timed(code: Path | None, *arguments: str) -> float | None:
    environment = dict(os.environ)
    if code is not None:
        environment["PYTHONPATH"] = str(code)
    started = time.perf_counter()
    try:
        completed = subprocess.run([sys.executable, "-c", _CLI, *arguments], env=environment, capture_output=True, text=True,
                                   timeout=LIMIT_SECONDS, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    elapsed = time.perf_counter() - started
    if completed.returncode not in (0, 1) or "Traceback" in completed.stderr:
        print(f"  {' '.join(arguments)}: exit {completed.returncode}: {completed.stderr.strip()[-300:]}", file=sys.stderr)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--code", type=Path, default=None, help="directory holding the ckptspec package to time")
    parser.add_argument("--runs", type=int, default=RUNS)
    arguments = parser.parse_args()
    DIRECTORY.mkdir(parents=True, exist_ok=True)
    cases = []
    for depth in DEPTHS:
        hparams, lists = DIRECTORY / f"hparams-{depth}.ckpt", DIRECTORY / f"lists-{depth}.pkl"
        if not hparams.exists():
            write_hparams(hparams, depth)
        if not lists.exists():
            write_lists(lists, depth)
        cases += [(f"inspect hparams-{depth}", ("inspect", str(hparams))), (f"validate hparams-{depth}", ("validate", str(hparams))),
                  (f"manifest hparams-{depth}", ("manifest", str(hparams), "--force")), (f"inspect lists-{depth}", ("inspect", str(lists)))]  # fmt: skip
    for name, command in cases:
        times = [_timed(arguments.code, *command) for _ in range(arguments.runs)]
        finished = [seconds for seconds in times if seconds is not None]
        figure = f"{statistics.median(finished):8.2f} s" if len(finished) == len(times) else f"> {LIMIT_SECONDS} s"
        print(f"{name:28} {figure}", flush=True)


if __name__ == "__main__":
    main()
