"""The operator's pages: the ModelAdmins (admins), their display helpers, form fields
and the extra views (dashboard, live pages).
"""

from containers.admin import admins, workspaces  # noqa: F401  (registers the ModelAdmins)
