"""Kernel times measured on a real GPU in place of the GPU model (--gpu-profile FILE).

The paper replayed per-batch MLP times measured on an RTX 3090; a profile does the same
for any GPU. scripts/profile_gpu.py writes one: JSON with the model's dense shape, the
batch size, and microseconds either per kernel of workloads/opgraph.py's step
(``kernels``) or per op group (``groups``: bottom_fwd, interaction_top_fwd,
top_bwd_interaction, bottom_bwd). A group's time is spread over its kernels in
proportion to the model's times, so the group sums are exactly the measured ones.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from components.compute.gpu import Gpu
from components.sim.input_files import InputFileError, read_text
from simulate.run.options import UsageError
from workloads.models import ModelSpec
from workloads.opgraph import OP_NAMES, batch_kernels, split_samples

FORMAT = "trainingcxl-gpu-profile/1"
TICKS_PER_US = 1_000_000


def dense_shape(spec: ModelSpec) -> dict[str, Any]:
    """What decides a step's kernels (the embedding tables' sizes do not)."""
    return {
        "dense_features": spec.dense_features,
        "embedding_dim": spec.embedding_dim,
        "num_tables": spec.num_tables,
        "bottom_mlp": list(spec.bottom_mlp),
        "top_mlp": list(spec.top_mlp),
    }


def profile_document(
    spec: ModelSpec, batch_size: int, device: str, method: str, times: dict[str, dict]
) -> dict[str, Any]:
    """A profile file's content; ``times`` holds ``kernels`` or ``groups`` (us)."""
    return {
        "format": FORMAT,
        "device": device,
        "method": method,
        "model": spec.name,
        "shape": dense_shape(spec),
        "batch_size": batch_size,
        "unit": "us",
        **times,
    }


MAX_PROFILE_BYTES = 16 << 20
"""A profile holds a time per op group or kernel: a few KiB (a bound refuses a device
or a huge file before reading it)."""


def load_profile(path: str) -> dict[str, Any]:
    """The file's JSON; an unreadable, non-regular or malformed one is refused in one
    line, before reading for what is not a regular file (a FIFO would block)."""
    try:
        document = json.loads(read_text(path, MAX_PROFILE_BYTES))
    except InputFileError as exc:
        raise UsageError(f"--gpu-profile {path}: {exc}") from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"--gpu-profile {path}: not JSON ({exc})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise UsageError(f"--gpu-profile {path}: not a GPU profile (format {FORMAT!r})")
    return document


def measured_ticks(
    document: dict[str, Any], path: str, spec: ModelSpec, batch_size: int, gpu: Gpu
) -> dict[str, int]:
    """Ticks per kernel name of the run's step, from a profile that matches it."""
    where = f"--gpu-profile {path}"
    if document.get("shape") != dense_shape(spec):
        raise UsageError(
            f"{where}: measured for model {document.get('model')!r} "
            f"{document.get('shape')}, not this run's {spec.name!r} {dense_shape(spec)}"
        )
    if document.get("batch_size") != batch_size:
        raise UsageError(
            f"{where}: measured at batch size {document.get('batch_size')!r}, "
            f"this run's GPUs each run {batch_size}"
        )
    step = batch_kernels(spec, batch_size)
    if ("kernels" in document) == ("groups" in document):
        raise UsageError(f"{where}: give either 'kernels' or 'groups' times, not both")
    if "kernels" in document:
        names = [k.name for group in step.values() for k in group]
        return {name: ticks for name, ticks in _ticks(document["kernels"], names, where)}
    groups = dict(_ticks(document["groups"], OP_NAMES, where))
    ticks: dict[str, int] = {}
    for op, kernels in step.items():
        ticks.update(_spread(groups[op], [k.name for k in kernels], kernels, gpu))
    return ticks


def _ticks(times: Any, names: Iterable[str], where: str) -> Iterable[tuple[str, int]]:
    names = list(names)
    if not isinstance(times, dict) or set(times) != set(names):
        given = set(times) if isinstance(times, dict) else set()
        missing, extra = sorted(set(names) - given), sorted(given - set(names))
        raise UsageError(
            f"{where}: its kernels are not this run's step's (missing {missing[:3]}, "
            f"extra {extra[:3]})"
        )
    for name in names:
        value = times[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UsageError(f"{where}: {name}: {value!r} is not a number of microseconds")
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{where}: {name}: {value!r} us is not a positive time")
        yield name, round(value * TICKS_PER_US)


def _spread(total: int, names: list[str], kernels, gpu: Gpu) -> dict[str, int]:
    """``total`` ticks over the kernels in proportion to the model's times, summing to
    ``total`` exactly (cumulative rounding)."""
    model = [gpu.model_ticks(k) for k in kernels]
    whole, running, before, out = sum(model), 0, 0, {}
    for name, ticks in zip(names, model, strict=True):
        running += ticks
        after = total * running // whole
        out[name] = after - before
        before = after
    return out


def apply_profile(board, path: str, spec: ModelSpec, batch_size: int) -> None:
    """Give every GPU of the board the measured times; every GPU of a data-parallel job
    runs its share of the samples, which must all be the profile's batch size."""
    document = load_profile(path)
    shares = set(split_samples(batch_size, getattr(board, "gpu_count", 1)))
    if len(shares) > 1:
        raise UsageError(
            f"--gpu-profile {path}: the batch splits unevenly over the GPUs "
            f"({sorted(shares)} samples): one profile cannot time both"
        )
    share = shares.pop()
    for gpu in board.descendants():
        if isinstance(gpu, Gpu):
            gpu.use_measured(measured_ticks(document, path, spec, share, gpu))
