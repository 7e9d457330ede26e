"""The operator's pages: one module of ModelAdmins per model family (instances,
templates, runtimes, history and orphans, runtime events, workspaces), what they share
(``common``), their display helpers, form fields and the extra views (dashboard, live
pages).
"""

from containers.admin import (  # noqa: F401  (registers them)
    common,
    history,
    instances,
    runtime_events,
    runtimes,
    templates,
    workspaces,
)
