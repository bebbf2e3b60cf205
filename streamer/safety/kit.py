"""One place that builds the safety parts from server settings, for the lead to wire into the server:
audit log, watermark policy + stage factory, prompt gate, source gate, token store + middleware."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streamer.safety.audit import AuditConfig, AuditLog, default_audit_path
from streamer.safety.auth import AccessPolicy, TokenStore, auth_middleware
from streamer.safety.denylist import IdentityDenylist, SourceGate
from streamer.safety.filters import PromptFilter, PromptGate, PromptPolicy
from streamer.safety.watermark import WatermarkPolicy, payload_recorder, resolve_policy
from streamer.stages.watermark import WatermarkStage


@dataclass(frozen=True, slots=True)
class SafetyConfig:
    host: str = "127.0.0.1"
    audit_path: str = field(default_factory=lambda: default_audit_path())
    audit_key_file: str | None = None
    server_id: int = 0
    disable_watermark: bool = False        # the explicit, logged, audited switch
    disable_reason: str = ""
    policy_path: str | None = None         # None: the shipped streamer/safety/policy.json
    denylist_dir: str | None = None
    tokens_file: str | None = None
    allowed_origins: tuple[str, ...] = ()


@dataclass
class SafetyKit:
    config: SafetyConfig
    audit: AuditLog
    watermark: WatermarkPolicy
    prompts: PromptGate
    sources: SourceGate
    tokens: TokenStore
    access: AccessPolicy
    extras: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def build(cls, config: SafetyConfig, *, encoder: Any, registry: Any, landmarker: Any) -> "SafetyKit":
        """`registry` is the product's SourceRegistry (with its identity embedder); `landmarker` reads the
        denylist's reference photos."""
        key = Path(config.audit_key_file).read_bytes().strip() if config.audit_key_file else None
        audit = AuditLog(AuditConfig(config.audit_path, key=key))
        policy = resolve_policy(disable=config.disable_watermark, server_id=config.server_id,
                                reason=config.disable_reason, audit=audit)
        prompts = PromptGate(PromptFilter(PromptPolicy.load(config.policy_path), encoder), audit=audit)
        deny = IdentityDenylist(config.denylist_dir, registry.embedder, landmarker) if config.denylist_dir else None
        sources = SourceGate(registry, deny, audit=audit)
        tokens = TokenStore.load(config.tokens_file) if config.tokens_file else TokenStore()
        access = AccessPolicy.for_host(config.host, allowed_origins=tuple(config.allowed_origins))
        return cls(config, audit, policy, prompts, sources, tokens, access)

    def middleware(self):
        return auth_middleware(self.tokens, self.access)

    def watermark_stage(self) -> WatermarkStage:
        """One per session pipeline, last."""
        return WatermarkStage(self.watermark, on_payload=payload_recorder(self.audit, self.watermark.bucket_seconds))

    def close(self) -> None:
        self.audit.close()
