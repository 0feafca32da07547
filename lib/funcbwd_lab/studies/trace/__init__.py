"""What does a backward formula do under vmap? Every torch call it makes, with the interpreter
stack, dispatch TLS, wrapper chains and how vmap handles each call; ``python -m funcbwd_lab trace``."""
