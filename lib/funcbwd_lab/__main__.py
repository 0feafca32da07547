import sys

from funcbwd_lab.cli import main

sys.exit(main())
