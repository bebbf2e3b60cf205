"""`--set NAME=VALUE` for the evals: a configuration dataclass with fields overridden from the command line,
so a tuning or an ablation is measured by the same harness as the defaults, and says so in its output."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, TypeVar

T = TypeVar("T")

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def overridden(config: T, settings: list[str]) -> tuple[T, dict[str, Any]]:
    """`config` with each NAME=VALUE of `settings` put in (parsed as the field's int, float or bool), and the
    overrides as a dict; SystemExit naming the field or value when one is not the config's."""
    kinds = {f.name: f.type for f in fields(config)}   # types are strings under `from __future__ import annotations`
    over: dict[str, Any] = {}
    for setting in settings:
        name, eq, text = setting.partition("=")
        if not eq or name not in kinds:
            raise SystemExit(f"--set {setting!r}: {type(config).__name__} has no field {name!r} "
                             f"(NAME=VALUE, one of {', '.join(kinds)})")
        kind = str(kinds[name])
        try:
            if kind in ("bool", str(bool)):
                if text.lower() not in _TRUE + _FALSE:
                    raise ValueError(text)
                over[name] = text.lower() in _TRUE
            elif kind in ("int", str(int)):
                over[name] = int(text)
            elif kind in ("float", str(float)):
                over[name] = float(text)
            else:
                raise SystemExit(f"--set {name}: a {kind} field is not set from the command line")
        except ValueError:
            raise SystemExit(f"--set {name}={text!r}: expected {kind}") from None
    return replace(config, **over), over
