"""`livefuse prompt TEXT --json`: what a prompt is understood as, through the same cache the server uses,
and the prompt policy's verdict on it (allowed or refused, the category, the clause, what decided)."""

from __future__ import annotations

HELP = "show the condition and edits a prompt maps to"


def add_arguments(parser) -> None:
    parser.add_argument("text", help="the prompt (quote it)")
    parser.add_argument("--encoder", help="e5 (the default, multilingual), minilm (English only), or a local transformers model folder")
    parser.add_argument("--artifact", help="calibration artifact (default: the one made for the encoder)")
    parser.add_argument("--policy", help="prompt policy file (default: the shipped streamer/safety/policy.json)")
    parser.add_argument("--json", action="store_true", help="print JSON (the default)")


def run(args) -> int:
    import json
    import sys

    from engines.artifacts import CalibrationError

    from engines.prompt.encoder import EncoderError
    from streamer.session.prompts import load_prompt_cache
    from streamer.safety.filters import PolicyError, PromptFilter

    try:
        cache = load_prompt_cache(args.encoder, args.artifact)
        policy = PromptFilter(args.policy, cache.model)
    except (EncoderError, CalibrationError, PolicyError) as exc:
        sys.stderr.write(f"livefuse prompt: {exc}\n")
        return 2
    try:
        import time

        first = cache.get(args.text)   # a fresh process has an empty cache: this is a miss unless the prompt is empty
        cond = first or cache.wait(args.text, timeout=120)
        if cond is None:
            sys.stderr.write(f"livefuse prompt: {cache.error(args.text) or 'encoding did not finish'}\n")
            return 1
        t0 = time.perf_counter()
        cache.get(args.text)           # what a live session pays per frame once the prompt is cached
        lookup_ms = (time.perf_counter() - t0) * 1000.0
        out = {
            "text": args.text, "encoder": cond.encoder,
            "condition": {"dim": int(cond.vector.shape[0]), "norm": round(cond.norm, 4)},
            "edits": {k: round(float(v), 4) for k, v in cond.edits.items()},
            "cached": first is not None, "encode_ms": round(cond.encode_ms, 2), "lookup_ms": round(lookup_ms, 4),
            "understood": cond.summary(), "encoder_text": cond.encoder_text,
            "truncated": cond.truncated, "n_tokens": cond.n_tokens, "unknown": "".join(dict.fromkeys(cond.unknown)),
            "clauses": list(cond.clauses), "ignored": list(cond.ignored), "not_understood": not cond.understood,
            "policy": policy.check(args.text, cond).as_dict(),
        }
        if cond.intents is not None:
            out["intent"] = {text: {c: round(float(p), 3) for c, p in zip(cond.intents.classes, cond.intents.probs[i])}
                             for i, text in enumerate(cond.row_texts())}
    finally:
        cache.close()
    sys.stdout.write(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    return 0
