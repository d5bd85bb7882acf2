"""torch for the scorer, imported first by the package: without it, ``UnavailableError``
(``E_UNAVAILABLE``) naming the extra to install instead of a bare ``ModuleNotFoundError``."""

from __future__ import annotations

from ..core.optional import require

torch = require("torch", what="sampling_mask.reference_scorer")
