"""`livefuse eval NAME --json`: run a quality harness from `bench/evals/` and print its figures."""

from streamer.app.commands._dispatch import add_named_modules, run_named_module

HELP = "run a quality harness (fusion, prompts, ...) and print JSON"


def add_arguments(parser):
    add_named_modules(parser, "bench.evals")


run = run_named_module
