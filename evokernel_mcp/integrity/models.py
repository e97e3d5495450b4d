"""Typed pieces of the integrity self-test: an exploit of the corpus, what it must meet, one replay row."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Family = Literal["timing", "outputs", "precision", "harness", "escape", "backend"]
FAMILIES: tuple[str, ...] = ("timing", "outputs", "precision", "harness", "escape", "backend")
Tool = Literal["verify_vs_pytorch", "benchmark", "profile_pmc", "evaluate_batch", "compile_kernel"]
Backend = Literal["cpu", "cuda", "rocm"]


class Expect(BaseModel):
    """The defence an exploit must meet. Every replay also checks that no planted secret appears anywhere in
    the answer and that nothing was written to the world-writable directory outside every scratch dir."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    verdict: Literal["verify_fails", "benchmark_invalid", "rejected", "answered"] = Field(
        description="verify_fails: passed is not true; benchmark_invalid: no shape is valid with a speedup above "
        "max_speedup; rejected: the tool answers with an error; answered: any answer (the exploit's own output may "
        "be right: only what follows it is at stake).")
    error_kinds: tuple[str, ...] = Field(default=(), description="When set: the result's error kind is one of these.")
    max_speedup: float = Field(default=1.15, description="benchmark_invalid: a valid result may claim at most this "
                               "speedup (the exploit's true speedup is about 1).")
    strict: bool = Field(default=False, description="benchmark_invalid: valid must be false with its reason (no "
                         "allowance for the exploit's true speedup; e.g. a precision downgrade).")
    next_unchanged: bool = Field(default=False, description="Then a correct candidate passes and a wrong one fails "
                                 "(checked once after the family's last such exploit).")

    def describe(self) -> str:
        bench = "valid=false" if self.strict else f"valid=false (or speedup <= {self.max_speedup})"
        parts = {"verify_fails": "verify fails", "benchmark_invalid": bench,
                 "rejected": "tool error", "answered": "answered"}[self.verdict]
        if self.error_kinds:
            parts += f", error kind in {'/'.join(self.error_kinds)}"
        if self.next_unchanged:
            parts += "; next verdicts unchanged"
        return parts + "; no secret out, nothing written outside scratch"


class Exploit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(pattern=r"^[a-z0-9_]+$")
    family: Family
    tool: Tool = "verify_vs_pytorch"
    source: str = Field(description="The public corpus it was ported from, or why it exists.")
    backends: tuple[Backend, ...] = ("cpu", "cuda", "rocm")
    expect: Expect
    args: dict[str, Any] = Field(default_factory=dict, description="Tool arguments besides the candidate.")
    candidate: str = Field(description="The exploit's source; __LEAK__ and __SECRET_ENV__ are filled in at replay.")


class Row(BaseModel):
    """One replayed exploit: what was expected, what happened, whether the defence held."""

    exploit: str
    family: str
    tool: str
    expected: str
    observed: str
    held: bool
    seconds: float | None = None


class Report(BaseModel):
    device: str
    backend: str
    started_utc: str
    versions: dict[str, str | None] = Field(default_factory=dict)
    rows: list[Row] = Field(default_factory=list)
    skipped: dict[str, str] = Field(default_factory=dict, description="Exploit -> why it was not replayed here.")

    @property
    def broken(self) -> list[Row]:
        return [r for r in self.rows if not r.held]

    @property
    def exit_code(self) -> int:
        return 1 if self.broken or not self.rows else 0
