"""No privacy (the default): reports and the server rule are left as they are."""

from __future__ import annotations

from ..config.base import NoOptions
from .base import PRIVACY, Privacy


@PRIVACY.register("none")
class NoPrivacy(Privacy):
    """Clip nothing, add no noise, account for nothing."""

    Config = NoOptions
