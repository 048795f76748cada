"""PyTorch is an optional extra (`pip install '.[bench]'`): only the reference implementations import it. Run without
it, they say so in one line and exit 2 instead of a traceback."""

from __future__ import annotations

import sys


def missing(err: ModuleNotFoundError) -> None:
    if err.name != "torch" and not str(err.name).startswith("torch."):
        raise err
    print("error: PyTorch is not installed; it is an optional extra for the reference implementations: "
          "pip install '.[bench]' (make bench installs a CPU build)", file=sys.stderr)
    sys.exit(2)
