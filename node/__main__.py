"""`python -m node --config FILE`: run one node daemon."""
import sys


def main() -> int:
    print("node daemon is not available yet (tracked in issue #5)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
