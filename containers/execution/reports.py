"""What one pass of a periodic job did (the reconciler, the lifecycle policies): its
counts and the errors it met, said as one line for the command's output and the logs."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PassReport:
    """The errors a pass met (one line each, in the order met); a subclass adds its
    counts and says them in ``counts()``. ``str()`` is the counts, then the errors, if
    any: ``"<counts>, errors: a; b"``."""

    errors: list[str] = field(default_factory=list)

    def counts(self) -> str:
        raise NotImplementedError

    def __str__(self) -> str:
        text = self.counts()
        return text + (f", errors: {'; '.join(self.errors)}" if self.errors else "")
