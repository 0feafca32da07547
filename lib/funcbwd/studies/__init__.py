"""studies: one package per question."""
