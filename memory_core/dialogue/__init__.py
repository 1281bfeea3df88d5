"""The dialogue turn, the memory's main noun: writing it, keeping it searchable, and the SQL of
its table cut by who uses it (``docs/architecture.md``, "For developers")."""
