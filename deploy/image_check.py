"""Run at image build time (deploy/Dockerfile), as the image's own user: every unpacked model file matches its
card's sha256, the models the server loads are found, and the text encoder answers a prompt offline."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys


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
    out = subprocess.run(["livefuse", "prompt", "hi", "--json"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        print(f"image check: livefuse prompt failed:\n{out.stderr[-2000:]}", file=sys.stderr)
        return 1
    json.loads(out.stdout)
    print("image check: livefuse prompt hi --json ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
