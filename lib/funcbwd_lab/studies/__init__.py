"""studies: one package per question, each holding how it is computed, what it saves, how it is
shown and its command.

``matrix`` (does each strategy make each transform work for each op?), ``trace`` and ``graphs``
(what does a formula do under vmap, and what does functionalization turn it into?), ``bench``
(what does it cost?), ``coverage`` (what happens on all of torch's own backward formulas, in every
composition functorch tests?), ``deletable`` (which of today's hand-written branches would be
unnecessary?), ``findings`` (the torch bugs found on the way), ``compiled`` (doesn't
torch.compile already do this?), ``yourcode`` (does the tool fix code nobody here wrote?),
``bad_input`` (what does bad input get?), ``review`` (the decision, its cost in C++, the PR).
Layers run one way within ``studies`` too (``tests/test_architecture.py``): review reads the
others; none reads review.
"""
