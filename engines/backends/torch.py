"""The torch port of the face networks on CPU or CUDA (the path to batching many streams on one GPU)."""

from __future__ import annotations

import importlib.util

from engines.backends.base import Backend, BackendSettings, Detector, Network


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


class TorchBackend(Backend):
    name = "torch"

    @classmethod
    def unavailable_reason(cls, settings: BackendSettings) -> str | None:
        if importlib.util.find_spec("torch") is None or importlib.util.find_spec("tflite") is None:
            return "torch and tflite are needed (pip install torch tflite)"
        import torch

        device = resolve_device(settings.device)
        if device.startswith("cuda") and not torch.cuda.is_available():
            return f"device {settings.device!r} asked for, but torch sees no CUDA GPU (torch {torch.__version__})"
        if settings.precision == "fp16" and not device.startswith("cuda"):
            return "fp16 needs a CUDA device; use precision='fp32' on the CPU"
        return None

    def __init__(self, settings: BackendSettings) -> None:
        super().__init__(settings)
        self.device = resolve_device(settings.device)

    def network(self, member: str) -> Network:
        from engines.landmarks.networks import LANDMARKS_MEMBER

        if self.settings.share_across_streams and member == LANDMARKS_MEMBER:
            from engines.batching import SharedBatchRunner, shared_runner

            s = self.settings
            return shared_runner(("torch", member, self.device, s.precision, s.max_batch),
                                 lambda forget: SharedBatchRunner(self._own_network(member), self.device,
                                                                  max_batch=s.max_batch, on_last_close=forget))
        return self._own_network(member)

    def _own_network(self, member: str) -> Network:
        import torch

        from engines.landmarks.networks import load_network

        net = load_network(member, self.device)
        if self.settings.precision == "fp16":
            net = net.half()

            def run(x: torch.Tensor) -> list[torch.Tensor]:
                return [o.float() for o in net(x.half())]

            return run
        return net

    def landmarker(self, config) -> Detector:
        from engines.landmarks.graph import LandmarkGraph

        from engines.backends.interpreter import InterpreterRunner   # the full-range detector runs in LiteRT

        return LandmarkGraph(config, self.device, network_factory=self.network, full_range_runner=InterpreterRunner)

    def describe(self) -> dict:
        return {"backend": self.name, "device": self.device, "precision": self.settings.precision}
