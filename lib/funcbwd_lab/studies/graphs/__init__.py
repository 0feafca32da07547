"""What does functionalization turn a formula into? Its graphs plain -> functionalized -> copies
elided, and the copies each form makes; ``python -m funcbwd_lab graph``."""
