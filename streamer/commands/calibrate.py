"""`livefuse calibrate [--encoder PATH]`: fit the prompt projector + edit head for a local encoder."""

from __future__ import annotations

HELP = "fit the prompt -> edits head for a text encoder from the phrase corpus and save the artifact"


def add_arguments(parser) -> None:
    parser.add_argument("--encoder", help="local transformers model folder (default: the bundled all-MiniLM-L6-v2)")
    parser.add_argument("--corpus", help="phrase corpus folder with train.jsonl and heldout.jsonl (default: data/prompts)")
    parser.add_argument("-o", "--output", help="artifact path (default: engines/assets/ for the bundled encoder, "
                                               "else $LIVEFUSE_HOME/prompt_heads/<encoder id>.safetensors)")
    parser.add_argument("--no-glossary", action="store_true", help="feed Chinese to the encoder as is (multilingual encoders)")
    parser.add_argument("--steps", type=int, default=None, help="optimiser steps (default 400)")
    parser.add_argument("--device", default="cpu", help="device for the encoder (cpu, cuda)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (the default)")


def run(args) -> int:
    import json
    import sys
    from dataclasses import replace

    from engines.calibration import CORPUS_DIR, CalibrationConfig, calibrate
    from engines.text import DEFAULT_ARTIFACT, EncoderError, TextEncoder, artifact_path_for

    try:
        encoder = TextEncoder(args.encoder, device=args.device)
    except EncoderError as exc:
        sys.stderr.write(f"livefuse calibrate: {exc}\n")
        return 2
    config = CalibrationConfig(glossary=not args.no_glossary)
    if args.steps:
        config = replace(config, steps=args.steps)
    output = args.output or (DEFAULT_ARTIFACT if args.encoder is None else artifact_path_for(encoder.id))
    try:
        _, report = calibrate(encoder, args.corpus or CORPUS_DIR, output, config)
    except (FileNotFoundError, ValueError) as exc:
        sys.stderr.write(f"livefuse calibrate: {exc}\n")
        return 2
    sys.stdout.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return 0
