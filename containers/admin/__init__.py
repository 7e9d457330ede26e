"""The operator's pages: the ModelAdmins (admins), their display helpers, form fields
and the extra views (dashboard, live pages).
"""

from containers.admin import admins, runtime_events, workspaces  # noqa: F401  (registers them)
