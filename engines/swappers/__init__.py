"""Bring-your-own neural face swappers: model cards recognised by a file's I/O signature (`cards`), and the
runner that aligns, swaps in batches and hands back crops (`swapper`). No swap weights ship in any package,
so every file here is the user's, pointed at with `--swapper` / `--swapper-embedder`."""
