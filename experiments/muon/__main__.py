"""python -m experiments.muon: its sweeps (runs/muon/), then results/muon/ (see --help)."""
import sys

from experiments.disputes import main
from experiments.muon.study import STUDY

sys.exit(main(STUDY))
