"""Benchmarks behind `livefuse bench NAME`: each module has `add_arguments(parser)` and `run(args) -> dict`
(the JSON it prints). They measure; they assert nothing."""
