"""Runtimes for the face models, one file each, behind `Backend` (base.py), picked by name from BACKENDS.

`select_backend(settings)` walks `settings.preference` in order and returns the first backend that can
run here; each one skipped is logged with its reason, so a silent slow path cannot happen.
"""

from __future__ import annotations

import importlib
import logging

from engines.backends.base import Backend, BackendSettings, BackendUnavailable, Detector, Network

log = logging.getLogger(__name__)

# name -> "module:Class"; modules import lazily so a missing GPU library never breaks the import
BACKENDS: dict[str, str] = {
    "litert": "engines.backends.litert:LiteRTBackend",
    "interpreter": "engines.backends.interpreter:InterpreterBackend",
    "torch": "engines.backends.torch:TorchBackend",
    "tensorrt": "engines.backends.tensorrt:TensorRTBackend",
}


def backend_class(name: str) -> type[Backend]:
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def select_backend(settings: BackendSettings = BackendSettings()) -> Backend:
    if not settings.preference:
        raise ValueError("backend preference list is empty")
    reasons: list[str] = []
    for name in settings.preference:
        cls = backend_class(name)
        try:
            backend = cls(settings)
        except BackendUnavailable as exc:
            reason = str(exc)
        except Exception as exc:  # a backend that fails to start is skipped, with the reason logged
            reason = f"{name}: failed to start: {type(exc).__name__}: {exc}"
        else:
            if reasons:
                log.warning("face backend %r in use; skipped %s", name, "; ".join(reasons))
            else:
                log.info("face backend %r in use", name)
            return backend
        reasons.append(reason)
        log.info("face backend %s", reason)
    raise BackendUnavailable("no face backend can run here: " + "; ".join(reasons))


__all__ = ["BACKENDS", "Backend", "BackendSettings", "BackendUnavailable", "Detector", "Network",
           "backend_class", "select_backend"]
