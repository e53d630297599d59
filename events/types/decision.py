"""The `decision` category: categorised, and published by nothing in this build (seed 000).

DACI discussion is behavioural guidance on the org's own chat surfaces, and a decision
somebody must make is a structured ask on a work item, woken as `asked`/`answered`. These
four stay mapped as the seam an extension writes through; their fields are the DACI roles.
"""
from __future__ import annotations

from events.envelope import register
from events.types.shapes import SeatEvent, because, clip, person


class DecisionEvent(SeatEvent):
    """One decision, named by `decision_id` and its `subject`."""

    decision_id: str = ""
    subject: str = ""

    @property
    def topic(self) -> str:
        return f'"{clip(self.subject, 80)}"' if self.subject else "something"


@register("decision_requested")
class DecisionRequested(DecisionEvent):
    """A driver asked an approver to decide between options."""

    driver: str = ""
    approver: str = ""
    options: list[str] = []
    body: str = ""

    def summary(self, event) -> str:
        whom = f" of {self.approver}" if self.approver else ""
        return f"{person(self.driver, self.seat)} requested a decision{whom} on {self.topic}"


@register("decision_resolved")
class DecisionResolved(DecisionEvent):
    """The approver chose."""

    approver: str = ""
    choice: str = ""
    reason: str = ""

    def summary(self, event) -> str:
        chose = f": {clip(self.choice, 80)}" if self.choice else ""
        return f"{person(self.approver, self.seat)} decided {self.topic}{chose}"


@register("contribution_requested")
class ContributionRequested(DecisionEvent):
    """A driver asked a contributor for input on a decision."""

    driver: str = ""
    contributor: str = ""
    body: str = ""

    def summary(self, event) -> str:
        return f"{person(self.driver, self.seat)} asked {self.contributor or 'a contributor'} for input on {self.topic}"


@register("contribution_received")
class ContributionReceived(DecisionEvent):
    """A contributor's input arrived."""

    contributor: str = ""
    body: str = ""

    def summary(self, event) -> str:
        return f"{person(self.contributor, self.seat)} contributed to {self.topic}{because(self.body)}"
