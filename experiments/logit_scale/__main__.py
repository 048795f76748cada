"""python -m experiments.logit_scale: its sweeps (runs/logit_scale/), then results/logit_scale/ (see --help)."""
import sys

from experiments.disputes import main
from experiments.logit_scale.study import STUDY

sys.exit(main(STUDY))
