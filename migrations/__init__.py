"""Forward-only numbered SQL files, shipped inside the core as ``memory_core.migrations``."""
