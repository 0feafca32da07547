"""``python -m funcbwd_lab.studies.cpp --out data/cpp.json``: the C++ study's one command."""

from funcbwd_lab.studies.cpp.run import main

raise SystemExit(main())
