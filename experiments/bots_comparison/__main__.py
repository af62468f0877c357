"""`python -m experiments.bots_comparison`: one selector's run, or --report-only (the package's docstring)."""

import sys

from experiments.bots_comparison.runs import main

sys.exit(main())
