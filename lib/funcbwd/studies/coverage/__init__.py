"""Coverage: which of torch's OpInfo ops pass which of functorch's transform compositions, and what
upstream expects of them (:mod:`.upstream`)."""
