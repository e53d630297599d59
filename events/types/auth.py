"""The `auth` category: the identity estate's audit, and the integrity of the state logs
(seed 002, "What gets stored").

Nothing here is authored at an anonymous caller's rate: a failed login is a metrics counter,
and what becomes a row is iam_login_failures, one per node per minute, published by the
engine's own flush loop with a count per source and never what was presented. No type here
carries a secret, a password or a code: only ids, names and outcomes.
"""
from __future__ import annotations

from datetime import datetime

from events.envelope import EventData, register
from events.types.shapes import because, count, person, possessive


class IdentityEvent(EventData):
    """Whose identity (`principal`, and the seat it is bound to) and who acted on it (`performed_by`)."""

    principal: str = ""
    principal_seat: str = ""
    performed_by: str = ""
    performed_by_seat: str = ""
    reason: str = ""

    @property
    def whose(self) -> str:
        return person(self.principal_seat, self.principal, default="a person")

    @property
    def by(self) -> str:
        return person(self.performed_by_seat, self.performed_by, default="")

    def actor(self, event) -> str:
        return person(self.performed_by_seat, self.performed_by, self.principal_seat, self.principal, event.source, default="system")


@register("iam_credential_minted")
class IAMCredentialMinted(IdentityEvent):
    credential_id: str = ""
    kind: str = ""
    grants: list[str] = []
    expires_at: datetime | None = None

    def summary(self, event) -> str:
        credential = " ".join(p for p in (self.kind or "credential", self.credential_id) if p)
        return f"{self.by or 'someone'} minted {credential} for {self.whose}"


@register("iam_credential_revoked")
class IAMCredentialRevoked(IdentityEvent):
    credential_id: str = ""
    kind: str = ""

    def summary(self, event) -> str:
        credential = " ".join(p for p in (self.kind or "credential", self.credential_id) if p)
        return f"{self.by or 'someone'} revoked {possessive(self.whose)} {credential}{because(self.reason)}"


@register("iam_grants_changed")
class IAMGrantsChanged(IdentityEvent):
    grants_before: list[str] = []
    grants_after: list[str] = []

    def summary(self, event) -> str:
        after = ", ".join(self.grants_after) or "none"
        return f"{self.by or 'someone'} changed {possessive(self.whose)} grants to {after}"


@register("iam_invitation_cancelled")
class IAMInvitationCancelled(IdentityEvent):
    invitation_id: str = ""

    def summary(self, event) -> str:
        return f"{self.by or 'someone'} cancelled the invitation for {self.whose}{because(self.reason)}"


@register("iam_login_failures")
class IAMLoginFailures(EventData):
    """Failed logins on this node over one minute: a count per source, never what was presented."""

    window_start: datetime | None = None
    window_seconds: int = 60
    counts_by_source: dict[str, int] = {}
    total: int = 0

    def summary(self, event) -> str:
        total = self.total or sum(self.counts_by_source.values())
        sources = len(self.counts_by_source)
        return f"{count(total, 'failed login')} in {self.window_seconds} s from {count(sources, 'source')}"

    def actor(self, event) -> str:
        return "system"


@register("iam_mfa_reset")
class IAMMFAReset(IdentityEvent):
    def summary(self, event) -> str:
        return f"{self.by or 'someone'} reset {possessive(self.whose)} second factor{because(self.reason)}"


@register("iam_password_changed")
class IAMPasswordChanged(IdentityEvent):
    def summary(self, event) -> str:
        return f"{self.whose} changed their password"


@register("iam_password_reset")
class IAMPasswordReset(IdentityEvent):
    """A person set a new password through a reset they were issued."""

    def summary(self, event) -> str:
        return f"{self.whose} reset their password"


@register("iam_password_reset_issued")
class IAMPasswordResetIssued(IdentityEvent):
    expires_at: datetime | None = None

    def summary(self, event) -> str:
        return f"{self.by or 'someone'} issued a password reset for {self.whose}"


@register("iam_recovery_code_used")
class IAMRecoveryCodeUsed(IdentityEvent):
    codes_left: int = 0

    def summary(self, event) -> str:
        return f"{self.whose} signed in with a recovery code ({count(self.codes_left, 'code')} left)"


@register("iam_second_factor_throttled")
class IAMSecondFactorThrottled(IdentityEvent):
    """A person's second-factor attempts hit the throttle (after a correct first factor)."""

    attempts: int = 0
    until: datetime | None = None

    def summary(self, event) -> str:
        return f"{possessive(self.whose)} second factor throttled after {count(self.attempts, 'attempt')}"


@register("iam_session_started")
class IAMSessionStarted(IdentityEvent):
    session_id: str = ""
    method: str = ""

    def summary(self, event) -> str:
        how = f" with {self.method}" if self.method else ""
        return f"{self.whose} signed in{how}"


@register("iam_session_ended")
class IAMSessionEnded(IdentityEvent):
    session_id: str = ""

    def summary(self, event) -> str:
        return f"{possessive(self.whose)} session ended{because(self.reason)}"


@register("iam_session_generation_bumped")
class IAMSessionGenerationBumped(IdentityEvent):
    """Every session of a principal is invalidated by moving its generation."""

    generation: int = 0

    def summary(self, event) -> str:
        return f"{self.by or 'someone'} signed {self.whose} out everywhere{because(self.reason)}"


@register("iam_stepup_completed")
class IAMStepupCompleted(IdentityEvent):
    session_id: str = ""
    method: str = ""

    def summary(self, event) -> str:
        how = f" with {self.method}" if self.method else ""
        return f"{self.whose} confirmed their identity{how}"


class StateLogIntegrity(EventData):
    """One record of a replicated state log that failed its integrity check."""

    log: str = ""
    position: str = ""
    record_id: str = ""
    detail: str = ""

    @property
    def record(self) -> str:
        at = f" at {self.position}" if self.position else ""
        return f"{self.log or 'state log'} record{at}"

    def actor(self, event) -> str:
        return "system"


@register("statelog_record_tampered")
class StatelogRecordTampered(StateLogIntegrity):
    expected_digest: str = ""
    found_digest: str = ""

    def summary(self, event) -> str:
        return f"{self.record} was altered{because(self.detail)}"


@register("statelog_record_unverifiable")
class StatelogRecordUnverifiable(StateLogIntegrity):
    reason: str = ""

    def summary(self, event) -> str:
        return f"{self.record} could not be verified{because(self.reason or self.detail)}"
