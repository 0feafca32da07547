"""Studies over the OpInfo coverage sweep (its saved records are their input)."""
