"""The design review: the decision (candidates ranked on computed criteria), what it would cost
in C++, and the PR sketch."""
