"""LiveFuse application: network, sessions, the frame pipeline, safety and the CLI."""

__version__ = "0.1.0"
