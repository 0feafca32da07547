"""What does bad input get? Every entry point tried with bad input; the README's table."""
