import sys

from funcbwd.cli import main

sys.exit(main())
