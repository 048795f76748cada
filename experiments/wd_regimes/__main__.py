"""python -m experiments.wd_regimes: its sweeps (runs/wd_regimes/), then results/wd_regimes/ (see --help)."""
import sys

from experiments.disputes import main
from experiments.wd_regimes.study import STUDY

sys.exit(main(STUDY))
