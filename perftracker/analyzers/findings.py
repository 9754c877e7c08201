"""The Finding record: one diagnosis with its evidence, cost (seconds per step), confidence and role.

`Kind` names the analyzers and `Mark` the keys the passes single out, so no pass matches them as text. Every
text a finding carries passes `redaction.safe_text` / `plain_line` when it is made (docs/internals/analyzers.md).
"""

from __future__ import annotations

import hashlib
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import IntEnum, StrEnum
from typing import Any

from perftracker.evidence.common import PassEvidence
from perftracker.redaction import plain_line, safe_text


class Severity(IntEnum):
    """Ordered severities: info < warning < critical."""

    INFO = 0
    WARNING = 1
    CRITICAL = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown severity {text!r}; use info, warning or critical") from None


class Role(StrEnum):
    """What a finding is in the story of the run: a cause, an effect of another finding, or a fact around them."""

    ROOT = "root"
    CONSEQUENCE = "consequence"
    CONTEXT = "context"


class Kind(StrEnum):
    """The built-in analyzers' names (`Finding.analyzer`; `registry.BUILTIN` lists one analyzer per name), plus
    the finding passes' own ("replay"). A member equals its name as text: `f.analyzer == Kind.CRASH`."""

    TOPOLOGY = "topology"
    BANDWIDTH = "bandwidth"
    BREAKDOWN = "breakdown"
    BASELINE_SHIFT = "baseline_shift"
    CPU_CONTENTION = "cpu_contention"
    WAITED_RANK = "waited_rank"
    CRASH = "crash"
    DEGRADATION = "degradation"
    GPU_HEALTH = "gpu_health"
    GPU_LINKS = "gpu_links"
    HANG = "hang"
    IDLE = "idle"
    INPUTS = "inputs"
    LINKS = "links"
    NCCL_BANDWIDTH = "nccl_bandwidth"
    NCCL_STRAGGLER = "nccl_straggler"
    NCCL_CONFIG = "nccl_config"
    OVERLAP = "overlap"
    PIPELINE = "pipeline"
    RDMA = "rdma"
    RDMA_PFC = "rdma_pfc"
    SILENT_HOST = "silent_host"
    STACK_PROFILE = "stack_profile"
    STEPS = "steps"
    STRAGGLER = "straggler"
    EFFICIENCY = "efficiency"
    REPLAY = "replay"

    def __hash__(self) -> int:  # as its text's: a Kind finds the analyzer's name in a dict or set, and back
        return hash(self.value)


class Mark(StrEnum):
    """The findings a pass singles out among one analyzer's, by the start of their key: the analyzer makes the
    key with `mark.key(...)` and a pass asks `mark.on(finding)`; no key text is typed twice."""

    WAIT_ROOT = "crash:root:"  # a root of the wait-for graph (`failures.roots`)
    FIRST_FAILURE = "crash:first:"  # the job's first failure (`failures.crash`)
    DEGRADATION_CHANGE = "degradation:change"  # the change point of the step times (`stragglers.degradation`)
    STRAGGLER_RANK = "straggler:"  # `straggler:<rank>`: one late rank (`stragglers.straggler`)
    STRAGGLER_MEASURED = "straggler:measured:"  # `straggler:measured:<rank>` (`stragglers.late_rank`)
    STEPS_PHASE = "steps:phase:"  # `steps:phase:<phase>:<rank>`: one rank's slow phase (`stragglers.steps`)
    OVERLAP_EXPOSED = "overlap:exposed"  # communication left exposed (`traces.overlap`)

    @property
    def kind(self) -> Kind:
        return Kind(self.value.split(":", 1)[0])

    def key(self, *parts: object) -> str:
        return self.value + ":".join(str(p) for p in parts)

    def on(self, f: Finding) -> bool:
        return f.analyzer == self.kind and f.key.startswith(self.value)


@dataclass(frozen=True)
class Cost:
    """Estimated cost of a problem: seconds lost per step and the share of step time it represents."""

    seconds_per_step: float = 0.0
    share_of_step: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return {
            "seconds_per_step": round(float(self.seconds_per_step), 9),
            "share_of_step": round(float(self.share_of_step), 6),
        }


@dataclass(frozen=True)
class Finding:
    """One diagnosis. `evidence` holds the numbers (JSON-serialisable) the claim rests on."""

    analyzer: str
    severity: Severity
    title: str
    recommendation: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    cost: Cost = Cost()
    related: tuple[str, ...] = ()
    key: str = ""
    fixed_id: str = ""
    confidence: float | None = None
    role: Role | None = None  # None: inferred when made (info: context, else root); always set after
    role_inferred: bool = field(default=False, repr=False, compare=False)  # the role follows the severity

    def __post_init__(self) -> None:  # the one choke point for text from inputs
        if self.role is None or self.role_inferred:  # inferred again when a pass changes the severity
            object.__setattr__(self, "role", Role.CONTEXT if self.severity == Severity.INFO else Role.ROOT)
            object.__setattr__(self, "role_inferred", True)
        object.__setattr__(self, "analyzer", str(self.analyzer))  # a Kind is stored as its text
        object.__setattr__(self, "title", safe_text(self.title))
        object.__setattr__(self, "recommendation", safe_text(self.recommendation))
        object.__setattr__(self, "evidence", safe_evidence(self.evidence))
        object.__setattr__(self, "hosts", tuple(plain_line(h) for h in self.hosts))

    @property
    def id(self) -> str:
        """Stable id: analyzer plus a short hash of the finding's key (or title and ranks)."""
        if self.fixed_id:
            return self.fixed_id
        basis = self.key or f"{self.title}|{self.ranks}|{self.hosts}"
        digest = hashlib.sha1(basis.encode("utf-8")).hexdigest()[:8]
        return f"{self.analyzer}-{digest}"

    def with_role(self, role: Role) -> Finding:
        """This finding with `role` stated (a finding pass's judgement: it no longer follows the severity)."""
        return replace(self, role=role, role_inferred=False)

    def with_related(self, ids: Iterable[str]) -> Finding:
        return replace(self, related=tuple(sorted(set(self.related) | set(ids))))

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "analyzer": self.analyzer,
            "severity": self.severity.label,
            "role": str(self.role),
            "title": self.title,
            "ranks": list(self.ranks),
            "hosts": list(self.hosts),
            "evidence": dict(self.evidence),
            "cost": self.cost.to_dict(),
            "confidence": None if self.confidence is None else round(float(self.confidence), 4),
            "recommendation": self.recommendation,
            "related": list(self.related),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        cost = data.get("cost") or {}
        return cls(
            analyzer=str(data["analyzer"]),
            severity=Severity.parse(str(data["severity"])),
            title=str(data["title"]),
            recommendation=str(data.get("recommendation", "")),
            evidence=dict(data.get("evidence") or {}),
            ranks=tuple(int(r) for r in data.get("ranks") or ()),
            hosts=tuple(str(h) for h in data.get("hosts") or ()),
            cost=Cost(float(cost.get("seconds_per_step", 0.0)), float(cost.get("share_of_step", 0.0))),
            related=tuple(str(r) for r in data.get("related") or ()),
            fixed_id=str(data.get("id", "")),
            confidence=_confidence(data.get("confidence")),
            role=_role(data.get("role")),
        )


def failure_finding(analyzer: str, title: str, recommendation: str, key: str) -> Finding:
    """A warning (context) that a part of perftracker failed, with the exception being handled's traceback."""
    return Finding(analyzer, Severity.WARNING, title, recommendation,
                   PassEvidence(traceback=traceback.format_exc(limit=6)), key=key, role=Role.CONTEXT)


NO_ACTION = "No action needed; listed so the scope of the analysis is clear."  # a context finding's advice
MAX_EVIDENCE_DEPTH = 64  # deeper than any evidence perftracker writes; deeper parts of an edited file are cut


def safe_evidence(evidence: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `evidence` with every string, keys too, passed through `safe_text`, walked without recursion; a
    part nested deeper than MAX_EVIDENCE_DEPTH becomes the text "<nested too deeply>"."""
    root: dict[str, Any] = {_safe_key(k): None for k in evidence}  # the keys in their order, filled below
    todo: list[tuple[Any, dict[str, Any] | list[Any], Any, int]] = [
        (v, root, _safe_key(k), 1) for k, v in evidence.items()]
    while todo:
        value, parent, slot, depth = todo.pop()
        if isinstance(value, (Mapping, list, tuple)) and depth > MAX_EVIDENCE_DEPTH:
            copy: Any = "<nested too deeply>"
        elif isinstance(value, Mapping):
            copy = {_safe_key(k): None for k in value}  # the keys in their order (the stack fills them last first)
            todo += [(v, copy, _safe_key(k), depth + 1) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            copy = [None] * len(value)
            todo += [(v, copy, i, depth + 1) for i, v in enumerate(value)]
        else:
            copy = safe_text(value) if isinstance(value, str) else value
        parent[slot] = copy
    return root


def _safe_key(key: Any) -> Any:
    """A key as one plain, redacted line when it is text; a number (a rank) stays a number."""
    return safe_text(key) if isinstance(key, str) else key if isinstance(key, (int, float)) else safe_text(str(key))


def _role(value: Any) -> Role | None:
    """A saved finding's role; None (inferred) when absent or not one of ours (a file written before roles)."""
    try:
        return Role(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _confidence(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def rank_findings(findings: Iterable[Finding]) -> list[Finding]:
    """The one order of findings everywhere (findings.json, terminal, report, verdict): severity, then cost per
    step and share of the step (largest first), then confidence (surest first), then title for stability."""
    return sorted(
        findings,
        key=lambda f: (-int(f.severity), -f.cost.seconds_per_step, -f.cost.share_of_step,
                       -(f.confidence if f.confidence is not None else 1.0), f.title),
    )
