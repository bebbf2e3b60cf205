"""A prompt's understanding: its language rules, the text encoder, the fitted heads, the reading."""
