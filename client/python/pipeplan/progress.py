"""Progress of long work on stderr: one live line on a terminal, plain lines otherwise.

The exporter on a big model spends seconds to minutes tracing, propagating shapes and
writing parameters; a user should see which phase runs and how far it is. On a
terminal a phase redraws one line ("shapes: node 812/1604 (50%), 3.1 s") at most
every 0.1 s and ends it with the phase's time; elsewhere (CI logs, pipes) each phase
prints a line when it starts and when it ends, and in between a line per 10% of its
items at most and only 5 s or more after the last one, so logs stay short. Nothing goes to stdout: a command's result stays parsable.
"""

import sys
import time

__all__ = ["Progress", "quiet"]

_REDRAW_SECONDS = 0.1
_PLAIN_LINE_SECONDS = 5.0


class Progress:
    """Reports phases of one piece of work to `stream` (default sys.stderr).

    with Progress("export") as p:
        with p.phase("shapes", total=len(nodes)) as ph:
            for n in nodes:
                ...
                ph.advance()
    `enabled=False` prints nothing (the --quiet of a command). `tty` overrides the
    stream's isatty() (tests)."""

    def __init__(self, name, stream=None, enabled=True, tty=None, clock=time.monotonic):
        self.name = name
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self.start = clock()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self._write("%s: done in %s\n" % (self.name, _seconds(self.clock() - self.start)))
        return False

    def phase(self, label, total=None):
        return _Phase(self, label, total)

    def _write(self, text):
        if self.enabled:
            self.stream.write(text)
            self.stream.flush()


class _Phase:
    def __init__(self, progress, label, total):
        self.p = progress
        self.label = label
        self.total = total
        self.done = 0
        self.start = progress.clock()
        self.last_draw = None
        self.last_line = self.start
        self.last_decile = 0

    def __enter__(self):
        if not self.p.tty:
            self.p._write("%s: %s...\n" % (self.p.name, self.label))
        else:
            self._draw(force=True)
        return self

    def __exit__(self, *exc):
        elapsed = _seconds(self.p.clock() - self.start)
        count = "" if self.total is None else " (%d)" % self.total
        end = "failed" if exc[0] is not None else "done"
        line = "%s: %s%s %s in %s" % (self.p.name, self.label, count, end, elapsed)
        self.p._write(("\r\033[K" + line + "\n") if self.p.tty else line + "\n")
        return False

    def restart(self, label):
        """The phase's work starts over as `label` (a fallback path)."""
        self.label, self.done, self.last_decile = label, 0, 0
        if not self.p.tty:
            self.p._write("%s: %s...\n" % (self.p.name, label))

    def advance(self, n=1):
        self.done += n
        if self.p.tty:
            self._draw()
        elif self.total:
            decile = 10 * self.done // self.total
            now = self.p.clock()
            if (decile > self.last_decile and self.done < self.total
                    and now - self.last_line >= _PLAIN_LINE_SECONDS):
                self.last_decile, self.last_line = decile, now
                self.p._write("%s: %s\n" % (self.p.name, self._status()))

    def _status(self):
        elapsed = _seconds(self.p.clock() - self.start)
        if not self.total:
            return "%s..., %s" % (self.label, elapsed)
        return "%s %d/%d (%d%%), %s" % (self.label, self.done, self.total,
                                        100 * self.done // self.total, elapsed)

    def _draw(self, force=False):
        now = self.p.clock()
        if not force and self.last_draw is not None and now - self.last_draw < _REDRAW_SECONDS:
            return
        self.last_draw = now
        self.p._write("\r\033[K%s: %s" % (self.p.name, self._status()))


def quiet():
    """A Progress that prints nothing (library calls without a progress argument)."""
    return Progress("", enabled=False, tty=False)


def _seconds(s):
    return "%.1f s" % s if s >= 0.1 else "%.0f ms" % (1000 * s)
