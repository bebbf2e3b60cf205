"""The model catalogue: one declarative file (models.json) naming the models people run with face swap
tools (swappers, their embedder, face enhancers, face parsers), where each is published, its sha256, input
signature, preprocessing and licence; and `livefuse models` to list, get, verify and remove them.
Nothing here runs at frame time and nothing downloads unless the user runs `livefuse models get`."""

from engines.catalogue.entries import (Catalogue, CatalogueError, Entry, Licence, Resolved, load, models_dir,
                                       resolve, verified_path)

__all__ = ["Catalogue", "CatalogueError", "Entry", "Licence", "Resolved", "load", "models_dir", "resolve",
           "verified_path"]
