"""A small progress bar on stderr (no dependency): redrawn in place on a terminal, one line per
step otherwise, so logs stay readable."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, label: str, width: int = 30) -> None:
        self.total, self.label, self.width = max(total, 1), label, width
        self.done, self.start = 0, time.perf_counter()
        self.tty = sys.stderr.isatty()

    def step(self, note: str = "") -> None:
        self.done += 1
        filled = self.width * self.done // self.total
        elapsed = time.perf_counter() - self.start
        eta = elapsed / self.done * (self.total - self.done)
        line = (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                f"{elapsed:5.1f} s, ~{eta:4.1f} s left {note}")
        if self.tty:
            sys.stderr.write("\r" + line[:120].ljust(120))
            if self.done == self.total:
                sys.stderr.write("\n")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
