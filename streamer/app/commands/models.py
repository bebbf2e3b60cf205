"""`livefuse models list | get NAME | verify [NAME...] | remove NAME`: the model catalogue
(engines/catalogue/models.json, docs/models.md): download with progress, resume and mirrors, sha256 checked
before install, licences shown and non-commercial ones accepted by name."""

from __future__ import annotations

import argparse

HELP = "list, get, verify and remove catalogue models (swappers, enhancers, parsers) with their licences"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from engines.catalogue.cli import add_arguments as catalogue_arguments

    catalogue_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from engines.catalogue.cli import run as catalogue_run

    return catalogue_run(args)
