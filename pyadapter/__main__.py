"""`python -m pyadapter ...` is the same as `nanlens ...` (debug sessions launch it this way)."""

import sys

from pyadapter.cli import main

sys.exit(main())
