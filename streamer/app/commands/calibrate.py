"""`livefuse calibrate [--encoder NAME|PATH]`: fit the prompt projector + edit head for an encoder."""

from __future__ import annotations

HELP = ("fit the prompt -> edits head (phrase corpus) and the intent head (policy corpus) for a text encoder "
        "and save both artifacts")


def add_arguments(parser) -> None:
    parser.add_argument("--encoder", help="e5 (the default: multilingual-e5-small), minilm (English-only MiniLM), "
                                          "or a local transformers model folder (decoder LLMs too)")
    parser.add_argument("--corpus", help="phrase corpus folder with train.jsonl and heldout.jsonl (default: data/prompts)")
    parser.add_argument("-o", "--output", help="artifact path (default: engines/assets/ for a named encoder, "
                                               "else $LIVEFUSE_HOME/prompt_heads/<encoder id>.safetensors)")
    g = parser.add_mutually_exclusive_group()
    g.add_argument("--no-glossary", dest="glossary", action="store_false", default=None,
                   help="feed Chinese to the encoder as is (the default for e5)")
    g.add_argument("--glossary", dest="glossary", action="store_true",
                   help="translate Chinese with engines/prompt/glossary.py first (the default for minilm and local folders)")
    parser.add_argument("--steps", type=int, default=None, help="optimiser steps of the edit head (default 600)")
    parser.add_argument("--only", choices=("edits", "intent"), help="fit one head only (default: both)")
    parser.add_argument("--policy-corpus", help="labelled policy corpus folder (default: data/policy/corpus)")
    parser.add_argument("--device", default="cpu", help="device for the encoder (cpu, cuda)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (the default)")


def run(args) -> int:
    import json
    import sys
    from dataclasses import replace
    from pathlib import Path

    from engines.prompt.calibration import CORPUS_DIR, CalibrationConfig, calibrate
    from engines.prompt.intent import intent_artifact_for
    from engines.prompt.intent_fit import POLICY_CORPUS, IntentConfig, calibrate_intent
    from engines.artifacts import pin
    from engines.prompt.encoder import EncoderError, TextEncoder
    from engines.prompt.head import artifact_path_for

    try:
        encoder = TextEncoder(args.encoder, device=args.device)
    except EncoderError as exc:
        sys.stderr.write(f"livefuse calibrate: {exc}\n")
        return 2
    config = CalibrationConfig(glossary=args.glossary)
    if args.steps:
        config = replace(config, steps=args.steps)
    named = encoder.spec.artifact if encoder.spec is not None else None
    output = Path(args.output or named or artifact_path_for(encoder.id))
    report: dict = {}
    try:
        if args.only != "intent":
            _, report["edits"] = calibrate(encoder, args.corpus or CORPUS_DIR, output, config)
            pin(output)
        if args.only != "edits":
            intent_out = intent_artifact_for(output)
            _, report["intent"] = calibrate_intent(encoder, intent_out, IntentConfig(),
                                                   policy_corpus=args.policy_corpus or POLICY_CORPUS,
                                                   prompt_corpus=args.corpus or CORPUS_DIR)
            pin(intent_out)
    except (FileNotFoundError, ValueError) as exc:
        sys.stderr.write(f"livefuse calibrate: {exc}\n")
        return 2
    sys.stdout.write(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return 0
