"""AdderBoard's scoring of an adder that `python -m miiii export-adder` wrote (score.py; guide: docs/adderboard.md)."""
