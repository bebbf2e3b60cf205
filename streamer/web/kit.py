"""The safety parts one server runs with, and their settings. `streamer.app.assembly.build_safety` makes
them; the server reaches them through the product's hooks."""

from __future__ import annotations

from dataclasses import dataclass, field

from streamer.safety.audit import AuditLog, default_audit_path
from streamer.safety.auth import AccessPolicy, TokenStore, auth_middleware
from streamer.safety.denylist import SourceGate
from streamer.safety.filters import PromptGate
from streamer.safety.watermark_policy import WatermarkPolicy


@dataclass(frozen=True, slots=True)
class SafetyConfig:
    host: str = "127.0.0.1"
    audit_path: str = field(default_factory=lambda: default_audit_path())
    audit_key_file: str | None = None
    audit_stdout: bool = False             # every audit record also to stdout as a JSON line (cluster log pipelines)
    server_id: int = 0
    disable_watermark: bool = False        # the explicit, logged, audited switch
    disable_reason: str = ""
    policy_path: str | None = None         # None: the shipped streamer/safety/policy.json
    denylist_dir: str | None = None
    tokens_file: str | None = None
    # with a tokens file on a loopback bind, token-less loopback clients are still served (as "loopback"):
    # a laptop's choice (`--open-loopback`), never a proxy's on the same host
    open_loopback: bool = False
    allowed_origins: tuple[str, ...] = ()
    public_hosts: tuple[str, ...] = ()     # names clients reach the server by (Host); loopback names are implied on loopback


@dataclass(frozen=True, slots=True)
class SafetyKit:
    config: SafetyConfig
    audit: AuditLog
    watermark: WatermarkPolicy
    prompts: PromptGate
    sources: SourceGate
    tokens: TokenStore
    access: AccessPolicy

    def middlewares(self) -> tuple:
        """CORS first (a preflight carries no token), then access."""
        from streamer.web.cors import cors_middleware

        return (cors_middleware(self.access.allowed_origins, self.access.protected_prefixes),
                auth_middleware(self.tokens, self.access))

    def close(self) -> None:
        self.audit.close()
