"""`livefuse bench NAME --json`: run a benchmark from `bench/` and print its figures as JSON."""

from streamer.app.commands._dispatch import add_named_modules, run_named_module

HELP = "run a benchmark (bench/NAME.py) and print JSON"


def add_arguments(parser):
    add_named_modules(parser, "bench")


run = run_named_module
