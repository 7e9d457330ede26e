"""The shared kernel: ideas every app uses and no app owns (see docs/architecture.md).

``core`` imports nothing of gobrave's own apps; ``outbox`` and ``containers`` import it.
"""
