"""python -m engines.catalogue list|get|verify|remove (the same as `livefuse models`)."""

from engines.catalogue.cli import main

raise SystemExit(main())
