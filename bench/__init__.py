"""Benchmarks behind `livefuse bench NAME`: each module has `add_arguments(parser)` and `run(args) -> dict`
(the JSON it prints). They measure; they assert nothing.

Some borrow the test suite's fixtures (the fake VTube Studio, the RTMP server, the face clips: one
definition of each), so benchmarks run from a source checkout: its root goes on the import path here,
after everything installed, because the `livefuse` script's own path does not hold it."""

import sys
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parents[1]
if (_CHECKOUT / "tests" / "__init__.py").is_file() and str(_CHECKOUT) not in sys.path:
    sys.path.append(str(_CHECKOUT))
