"""Quality harnesses behind `livefuse eval NAME`: each module has `add_arguments(parser)` and `run(args) -> dict`."""
