"""Responsible use: watermark policy (watermark.py), tamper-evident audit log (audit.py), prompt policy
(filters.py + policy.json), protected identities and consent (denylist.py), access control (auth.py),
session purge (privacy.py), and one builder for all of them (kit.py). See docs/safety.md."""
