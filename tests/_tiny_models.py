"""A tiny, randomly initialised decoder LLM saved to a temp folder (built offline from a config), so the
'any local encoder' path is tested without shipping a model."""

from __future__ import annotations

from pathlib import Path


def make_tiny_decoder(folder: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2Model

    from engines.prompt.encoder import default_encoder_path

    tok = AutoTokenizer.from_pretrained(default_encoder_path(), local_files_only=True)  # any real tokenizer will do
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=tok.vocab_size, n_embd=32, n_layer=2, n_head=2, n_positions=64)
    GPT2Model(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
