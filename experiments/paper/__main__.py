"""python -m experiments.paper [--smoke] ...: the paper study (study.py)."""

import sys

from experiments.paper.study import main

if __name__ == "__main__":
    sys.exit(main())
