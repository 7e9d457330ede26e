"""What one pass did (``ReconcileReport``)."""

from __future__ import annotations

from dataclasses import dataclass

from containers.execution.reports import PassReport


@dataclass
class ReconcileReport(PassReport):
    """What one pass did; the command prints it and the monitor logs it."""

    checked: int = 0
    changed: int = 0
    busy: int = 0
    timed_out: int = 0
    lost: int = 0
    orphans_new: int = 0
    orphans_removed: int = 0

    def counts(self) -> str:
        return (
            f"checked {self.checked}, changed {self.changed}, left to workers {self.busy}, "
            f"timed out {self.timed_out}, lost {self.lost}, new orphans {self.orphans_new}, "
            f"orphans removed {self.orphans_removed}"
        )
