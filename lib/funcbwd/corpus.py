"""The extended legacy-formula corpus beyond the 8 test ops (registered on import)."""
