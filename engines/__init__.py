"""How models run: model cards, runtimes (backends), faces, identity and text."""
