"""`python -m llamactl` runs the CLI, for environments without the console script on PATH."""

from llamactl.cli.main import run

if __name__ == "__main__":
    run()
