"""``python -m sampling_mask`` runs the ``sampling-mask`` command line (see :mod:`sampling_mask.cli`)."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
