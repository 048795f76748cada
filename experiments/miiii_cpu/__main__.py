"""python -m experiments.miiii_cpu: the search for miiii-cpu (study.py)."""

import sys

from experiments.miiii_cpu.study import main

if __name__ == "__main__":
    sys.exit(main())
