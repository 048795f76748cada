"""python -m experiments.muon: train AdamW and Muon in four settings (runs/muon/, reused when there) and write
results/muon/ (`--bundle-only`: results.md from the committed summaries alone)."""

import sys

from experiments.disputes import main
from experiments.muon.study import STUDY

if __name__ == "__main__":
    sys.exit(main(STUDY))
