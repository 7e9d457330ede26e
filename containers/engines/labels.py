"""Labels gobrave puts on every container it creates; the engine filters on them."""

from __future__ import annotations

LABEL_INSTALLATION = "io.gobrave.installation"
LABEL_INSTANCE = "io.gobrave.instance"
LABEL_TEMPLATE = "io.gobrave.template"

__all__ = ["LABEL_INSTALLATION", "LABEL_INSTANCE", "LABEL_TEMPLATE"]
