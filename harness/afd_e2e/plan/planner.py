# SPDX-License-Identifier: Apache-2.0
"""One planning run from its inputs as given on the command line: load them
(reporting every bad one at once), pick the stage model, search, analyse."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from afd_e2e.plan.analysis import analyse
from afd_e2e.plan.calibration import StageFits, load_calibration
from afd_e2e.plan.profiles import HardwareProfile, load_profile
from afd_e2e.plan.report import PlanReport
from afd_e2e.plan.search import SearchSpace, search
from afd_e2e.plan.shapes import resolve_shape
from afd_e2e.plan.stages import CalibratedModel, RooflineModel, StageModel
from afd_e2e.plan.types import ModelShape, PlanInputError, Workload
from afd_e2e.plan.workload import make_workload


@dataclass(frozen=True)
class PlanRequest:
    """The inputs of ``afd-e2e plan``, before loading."""

    model: str
    hardware: str
    tpot_ms: float = 50.0
    context: float | None = None
    trace: Path | None = None
    calibration: Path | None = None
    dtype: str | None = None
    kv_dtype: str = "bf16"
    max_attention: int = 16
    max_ffn: int = 8
    micro_batches: tuple[int, ...] = (1, 2, 3, 4)
    max_batch: int = 1 << 16
    evaluate: tuple[int, int] | None = None
    """(A, F): evaluate this deployment only (``--evaluate A:F``)."""
    batch: int | None = None
    """Sequences per attention instance per micro-batch, fixed (``--batch``)."""
    memory_fraction: float = 0.9
    top: int = 10
    root: Path | None = None
    model_root: Path | None = None


def make_plan(request: PlanRequest) -> PlanReport:
    """Raises ``PlanInputError`` with every problem of every input."""
    problems: list[str] = []
    shape: ModelShape | None = None
    profile: HardwareProfile | None = None
    workload: Workload | None = None
    fits: StageFits | None = None
    try:
        shape = resolve_shape(request.model, request.root, request.model_root)
    except PlanInputError as exc:
        problems += exc.problems
    try:
        profile = load_profile(request.hardware)
    except PlanInputError as exc:
        problems += exc.problems
    try:
        workload = make_workload(request.tpot_ms, request.context, request.trace)
    except PlanInputError as exc:
        problems += exc.problems
    if request.calibration is not None:
        try:
            fits = load_calibration(request.calibration)
        except PlanInputError as exc:
            problems += exc.problems
    if problems:
        raise PlanInputError(problems)
    assert shape is not None and profile is not None and workload is not None
    dtype = request.dtype or profile.compute_dtype or "bf16"
    model: StageModel
    if fits is not None:
        model = CalibratedModel(fits, shape, profile.shared_host_cores)
        source = f"calibrated: linear fits to {fits.rows} rows of {fits.source}"
        if profile.shared_host_cores is not None:
            source += (
                f"; all instances share {profile.shared_host_cores} cores "
                "(stage times x max(1, (A+F)/cores) over 1A1F's)"
            )
    else:
        model = RooflineModel.build(shape, profile, dtype, request.kv_dtype)
        source = "roofline at peak (an upper bound; --calibration for measured)"
    attention, ffn = request.evaluate or (None, None)
    space = SearchSpace(
        max_attention=attention or request.max_attention,
        max_ffn=ffn or request.max_ffn,
        min_attention=attention or 1,
        min_ffn=ffn or 1,
        batch=request.batch,
        micro_batches=request.micro_batches,
        max_batch=request.max_batch,
        memory_fraction=request.memory_fraction,
        dtype=dtype,
        kv_dtype=request.kv_dtype,
    )
    result = search(model, shape, profile, workload, space)
    analysis = analyse(shape, profile, workload, model, dtype, result.recommended)
    return PlanReport(
        shape=shape,
        profile=profile,
        workload=workload,
        space=space,
        stage_source=source,
        result=result,
        analysis=analysis,
        top=request.top,
    )
