"""python -m experiments.readout_scale: its sweeps (runs/readout_scale/), then results/readout_scale/ (see --help)."""
import sys

from experiments.disputes import main
from experiments.readout_scale.study import STUDY

sys.exit(main(STUDY))
