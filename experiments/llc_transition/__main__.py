"""python -m experiments.llc_transition: λ̂ over the paper runs, then results/llc_transition/ (see --help)."""
import sys

from experiments.llc_transition.study import main

sys.exit(main())
