"""The miiii-cpu search: experiments/miiii_cpu/study.py."""
