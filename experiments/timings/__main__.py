"""python -m experiments.timings: each CPU preset's time, measured (study.py)."""

import sys

from experiments.timings.study import main

if __name__ == "__main__":
    sys.exit(main())
