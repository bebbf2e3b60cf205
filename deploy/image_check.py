"""Run at image build time (deploy/Dockerfile), as the image's own user: every unpacked model file matches its
card's sha256, `livefuse serve`'s services build and load every shared model (imports and native libraries
included), and the text encoder answers a prompt offline. Its audit log goes to a throwaway folder: nothing
it writes stays in the image."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile


def main() -> int:
    from engines.cards import WHEEL_FILE_CARDS, model_dirs

    for card in WHEEL_FILE_CARDS.values():
        found = [d / card.file for d in model_dirs() if (d / card.file).is_file()]
        if not found:
            print(f"image check: {card.file} is missing from {[str(d) for d in model_dirs()]}", file=sys.stderr)
            return 1
        digest = hashlib.sha256(found[0].read_bytes()).hexdigest()
        if digest != card.sha256:
            print(f"image check: {found[0]} has sha256 {digest}, expected {card.sha256}", file=sys.stderr)
            return 1
        print(f"image check: {found[0]} sha256 ok")
    scratch = tempfile.mkdtemp(prefix="image-check-")
    os.environ["LIVEFUSE_AUDIT_LOG"] = os.path.join(scratch, "audit.jsonl")
    from streamer.app.assembly import build_services
    from streamer.app.cli import build_parser
    from streamer.app.commands.serve import product_config

    services = build_services(product_config(build_parser().parse_args(["serve"]), "127.0.0.1"))
    services.startup()
    services.shutdown()
    print("image check: the server's services load")
    import grpc  # the gRPC side (--grpc-port) and the client: their native extension loads in this image

    from livefuse.client import Client  # noqa: F401
    from streamer.rpc.server import FUSION

    print(f"image check: grpcio {grpc.__version__} serves {FUSION}, livefuse.client imports")
    out = subprocess.run(["livefuse", "prompt", "hi", "--json"], capture_output=True, text=True, timeout=300,
                         env={**os.environ})
    if out.returncode != 0:
        print(f"image check: livefuse prompt failed:\n{out.stderr[-2000:]}", file=sys.stderr)
        return 1
    json.loads(out.stdout)
    print("image check: livefuse prompt hi --json ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
