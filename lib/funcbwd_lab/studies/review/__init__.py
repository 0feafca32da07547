"""The design review: the decision (candidates ranked on computed criteria) and the answers to its
reviewers' next questions (torch.compile, the cost in C++, the PR sketch), computed from the saved
data."""
