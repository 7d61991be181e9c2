"""``python -m autotape warmup``: compile every kernel now (see warmup.py)."""
import sys

from .warmup import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
