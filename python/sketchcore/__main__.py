"""``python -m sketchcore``: the built-in benchmark (see sketchcore.cli)."""
import sys

from sketchcore.cli import main

sys.exit(main())
