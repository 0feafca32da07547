"""The design review's answers to its reviewers' questions, computed from the saved data."""
