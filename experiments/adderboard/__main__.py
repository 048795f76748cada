"""python -m experiments.adderboard ADDER.py [--pairs N] [--seed S] [--smoke]: score an exported adder (score.py)."""

import sys

from experiments.adderboard.score import main

if __name__ == "__main__":
    sys.exit(main())
