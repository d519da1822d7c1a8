"""``python -m zotsink`` is the same program as ``zotsink``."""

from .cli import main

if __name__ == "__main__":
    main()
