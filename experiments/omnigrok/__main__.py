"""python -m experiments.omnigrok: its sweeps (runs/omnigrok/), then results/omnigrok/ (see --help)."""
import sys

from experiments.disputes import main
from experiments.omnigrok.study import STUDY

sys.exit(main(STUDY))
