"""python -m experiments.wd_regimes: train the weight-decay grid (runs/wd_regimes/, reused when there) and write
results/wd_regimes/ (`--bundle-only`: results.md from the committed summaries alone)."""

import sys

from experiments.disputes import main
from experiments.wd_regimes.study import STUDY

if __name__ == "__main__":
    sys.exit(main(STUDY))
