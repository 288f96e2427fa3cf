"""``python -m scarce_ltr <command> ...``: the same as the ``scarce-ltr`` console script."""

from scarce_ltr.cli import main

if __name__ == "__main__":
    main()
