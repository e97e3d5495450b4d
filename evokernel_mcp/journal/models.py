"""Models of the experiment journal: note evidence (tool input), and the results of the journal tools.

Vocabulary: a *result* is one recorded tool call (id 'r-' + 12 hex); an *experiment* is a variant, named
by its label within a task (every result recorded under that label); a *note* is a lesson or a claim with
its evidence (id 'n-' + 12 hex). Times are ISO-8601 UTC strings; durations carry their unit in the name.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from evokernel_mcp.models import Model, Provenance

Verdict = Literal["valid", "failed", "unverified", "pending"]
RESULT_ID_PATTERN = r"^r-[0-9a-f]{12}$"
NOTE_ID_PATTERN = r"^n-[0-9a-f]{12}$"
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/+=@,-]{0,159}$"
LABEL_HELP = ("a label of 1-160 characters: letters, digits and _ . : / + = @ , - (e.g. 'conv3d/step3-lds'), "
              "starting with a letter or digit")


ExperimentArg = Annotated[str | None, Field(pattern=LABEL_PATTERN, description=(
    "Journal label of this variant (e.g. 'conv3d/step3-lds'): the call and its key results are recorded in the "
    "experiment journal (list_experiments, distill) and result_id is returned. Omit to record nothing."))]
TaskLabelArg = Annotated[str | None, Field(max_length=400, description=(
    "Journal only: the task this variant belongs to (a list_tasks name), recorded with experiment."))]
RESULT_ID_DESCRIPTION = "Journal result id of this call (set when `experiment` was given): cite it in record_note."


# ---------------------------------------------------------------- evidence (input of record_note)

class ResultEvidence(Model):
    """The claim is backed by a recorded tool result (its id from list_experiments / a tool's result_id)."""

    kind: Literal["result"]
    result_id: str = Field(pattern=RESULT_ID_PATTERN, description="Journal result id, e.g. 'r-0123456789ab'.")
    field: str | None = Field(default=None, max_length=200, description="Which number of that result, e.g. "
                              "'results[0].median_ms' (optional).")


class DocEvidence(Model):
    """The claim is backed by a doc section: evokernel://docs/<path>#<anchor> (anchors from list_docs)."""

    kind: Literal["doc"]
    anchor: str = Field(min_length=18, max_length=400, pattern=r"^evokernel://docs/[^#?\s]+(#[^#\s]+)?$",
                        description="e.g. 'evokernel://docs/gpu_arch/lds.md#lds-capacity'.")


class MeasuredEvidence(Model):
    """The claim is backed by a measured value with its unit and where it was measured."""

    kind: Literal["measured"]
    value: float = Field(allow_inf_nan=False)
    unit: str = Field(min_length=1, max_length=40, description="e.g. 'ms', 'GB/s', 'bytes', 'waves/SIMD'.")
    source: str = Field(min_length=3, max_length=300, description="What measured it: a result id ('r-...'), or "
                        "tool and device (e.g. 'rocminfo on MI300X', 'ncu on H200').")


class UnverifiedEvidence(Model):
    """No source yet: the note is listed by distill as an open claim until a source backs it."""

    kind: Literal["unverified"]
    reason: str | None = Field(default=None, max_length=300, description="Why it is believed (optional).")


Evidence = Annotated[ResultEvidence | DocEvidence | MeasuredEvidence | UnverifiedEvidence,
                     Field(discriminator="kind")]


class NoteRecord(Model):
    note_id: str
    task: str
    experiment: str | None = None
    kind: Literal["lesson", "claim"]
    text: str
    evidence: dict[str, Any] = Field(description="As given, with kind: result | doc | measured | unverified.")
    verified: bool = Field(description="False when evidence is 'unverified' (an open claim).")
    created_at: str
    already_recorded: bool = Field(default=False, description="True when the same note (task, variant, kind, text "
                                   "and evidence) was recorded before: this is that note, not a copy.")
    provenance: list[Provenance] = Field(default_factory=list)

    @field_validator("text")
    @classmethod
    def _strip(cls, v: str) -> str:
        return v.strip()


# ---------------------------------------------------------------- experiments

class ShapeTime(Model):
    """A benchmark figure of one shape set, as recorded (ms of device time; host time on the CPU path)."""

    shape: str
    median_ms: float | None = None
    ci_median_ms: tuple[float, float] | None = None
    baseline_median_ms: float | None = None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    baseline: Literal["pytorch", "source"] | None = Field(default=None, description="What the baseline time and "
        "speedup are against: 'pytorch' (the reference model) or 'source' (a baseline source the call named); "
        "None where the record does not say.")
    noise: bool | None = None
    valid: bool = Field(description="The benchmark's own validity (valid / correct_after_timing).")
    invalid_reason: str | None = None
    fraction_of_roofline: float | None = None
    device: str | None = None
    result_id: str


class ExperimentRow(Model):
    """One variant (a label within a task), condensed."""

    task: str
    label: str
    step: int = Field(description="Order of first appearance in the task (1 = first variant tried).")
    verdict: Verdict = Field(description="valid: verify passed and every benchmarked shape valid; failed: a "
                             "compile/verify/benchmark check failed; unverified: no verify yet; pending: a job runs.")
    failure_class: str | None = None
    failure_detail: str | None = None
    times: list[ShapeTime] = Field(default_factory=list, description="Latest benchmark, per shape.")
    resources: list[dict[str, Any]] = Field(default_factory=list, description="Latest compile, per kernel.")
    latest: dict[str, str] = Field(default_factory=dict, description="Tool -> latest result id.")
    candidate_sha256: str | None = None
    results: int = Field(description="Recorded tool calls under this label.")
    notes: int = 0
    first_at: str
    last_at: str


class ExperimentList(Model):
    experiments: list[ExperimentRow]
    total: int = Field(description="Experiments matching the filters.")
    offset: int
    next_offset: int | None = Field(description="Pass as offset for the next page; null at the end.")
    sort: str
    shape: str | None = Field(default=None, description="Shape set used to sort by speed.")
    journal: str = Field(description="The journal file.")
    provenance: list[Provenance] = Field(default_factory=list)


class BestEntry(Model):
    shape: str
    device: str | None = None
    label: str
    step: int
    median_ms: float
    ci_median_ms: tuple[float, float] | None = None
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    baseline_median_ms: float | None = None
    baseline: Literal["pytorch", "source"] | None = Field(default=None, description="What the baseline time and "
        "speedup are against: 'pytorch' (the reference model) or 'source' (a baseline source the call named); "
        "None where the record does not say.")
    verify_result_id: str = Field(description="The passing verify of this exact source.")
    result_id: str = Field(description="The benchmark result.")
    candidates: int = Field(description="Valid measurements considered for this shape and device.")


class BestSoFar(Model):
    task: str
    best: list[BestEntry] = Field(description="Per shape and device: the fastest valid variant.")
    excluded: dict[str, int] = Field(default_factory=dict, description="Measurements left out, by reason "
                                     "(unverified_source, failed_verify, or the benchmark's invalid_reason).")
    provenance: list[Provenance] = Field(default_factory=list)


class Delta(Model):
    name: str
    unit: str | None = None
    a: float | None = None
    b: float | None = None
    delta: float | None = Field(default=None, description="b - a.")
    ratio: float | None = Field(default=None, description="b / a.")
    ratio_ci: tuple[float, float] | None = Field(default=None, description="Conservative interval of b / a "
                                                 "from the two medians' intervals; None: no interval exists.")
    verdict: str | None = Field(default=None, description="For times: 'b faster', 'a faster' or 'no difference "
                                "shown' (the interval contains 1).")
    note: str | None = None


class SourceDiff(Model):
    a_sha256: str | None = None
    b_sha256: str | None = None
    identical: bool
    diff: str = Field(description="Unified diff a -> b (cut at max_diff_lines).")
    lines_total: int
    lines_left_off: int = 0


class Comparison(Model):
    task: str
    a: ExperimentRow
    b: ExperimentRow
    source: SourceDiff
    resources: list[Delta] = Field(default_factory=list, description="Latest compile of each, per kernel field.")
    times: list[Delta] = Field(default_factory=list, description="Per shape: median_ms a vs b with intervals.")
    counters: list[Delta] = Field(default_factory=list, description="Latest profile_pmc derived metrics and "
                                  "trace fractions (single readings: no interval).")
    counters_left_off: int = 0
    notes: list[str] = Field(default_factory=list)
    provenance: list[Provenance] = Field(default_factory=list)


class FailureClass(Model):
    failure_class: str
    count: int = Field(description="Experiments whose verdict failed this way.")
    labels: list[str] = Field(description="Up to 5 labels; the rest counted in labels_left_off.")
    labels_left_off: int = 0
    example: str | None = Field(default=None, description="The evidence of the first such failure.")
    example_result_id: str | None = None
    lessons: list[str] = Field(description="Lesson notes on these experiments (or their results); empty: none "
                               "recorded yet.")


class Distilled(Model):
    task: str
    experiments: int
    results: int
    verdicts: dict[str, int]
    winners: list[BestEntry]
    top_valid: list[ExperimentRow] = Field(default_factory=list, description="Fastest valid variants (main shape).")
    main_shape: str | None = None
    failures: list[FailureClass]
    lessons: list[NoteRecord] = Field(default_factory=list, description="Lessons not tied to a failure class.")
    lessons_left_off: int = 0
    unverified_claims: list[NoteRecord] = Field(description="Every note whose evidence is 'unverified' (newest "
                                                "first, up to max_claims).")
    unverified_claims_total: int
    verified_claims: int = 0
    provenance: list[Provenance] = Field(default_factory=list)


class TrajectoryExport(Model):
    task: str
    artifact_id: str = Field(description="read_artifact(artifact_id, name='report.md'); the chart is trajectory.png.")
    files: list[str]
    chart_uri: str
    report_uri: str
    points: int = Field(description="Variants drawn on the chart.")
    shape: str | None = None
    markdown_preview: str = Field(description="The report's start (the whole report is in the artifact).")
    preview_left_off_chars: int = 0
    provenance: list[Provenance] = Field(default_factory=list)
