"""pipeplan.progress, the exporter's progress on stderr: a live line on a terminal,
short plain lines elsewhere, nothing with --quiet; and the exporter's phases through
it. A fake clock drives the time; no sleeps."""

import io

import torch

from pipeplan.export.graph_export import export
from pipeplan.progress import Progress


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_plain_lines_name_each_phase_and_stay_few():
    out, clock = io.StringIO(), Clock()
    p = Progress("export", stream=out, tty=False, clock=clock)
    with p:
        with p.phase("shapes", total=1000) as phase:
            for _ in range(1000):
                clock.now += 0.02  # 20 s in all: a line per 5 s at most
                phase.advance()
    lines = out.getvalue().splitlines()
    assert lines[0] == "export: shapes..."
    middle = lines[1:-2]
    assert 2 <= len(middle) <= 4, lines
    assert all(line.startswith("export: shapes ") and "/1000 (" in line for line in middle)
    assert lines[-2] == "export: shapes (1000) done in 20.0 s"
    assert lines[-1] == "export: done in 20.0 s"
    assert "\r" not in out.getvalue()


def test_terminal_redraws_one_line_at_most_ten_times_a_second():
    out, clock = io.StringIO(), Clock()
    p = Progress("export", stream=out, tty=True, clock=clock)
    with p.phase("costs", total=100) as phase:
        for _ in range(100):
            clock.now += 0.01  # 1 s in all
            phase.advance()
    text = out.getvalue()
    assert text.endswith("\r\033[Kexport: costs (100) done in 1.0 s\n")
    assert text.count("\n") == 1  # one line, redrawn in place
    assert 8 <= text.count("\r\033[K") <= 13, text  # ~10 redraws, the first and the end


def test_a_failed_phase_says_so_and_quiet_prints_nothing():
    out = io.StringIO()
    p = Progress("export", stream=out, tty=False, clock=Clock())
    try:
        with p.phase("tracing"):
            raise ValueError("untraceable")
    except ValueError:
        pass
    assert out.getvalue().splitlines()[-1] == "export: tracing failed in 0 ms"
    silent = io.StringIO()
    with Progress("export", stream=silent, enabled=False) as q:
        with q.phase("shapes", total=3) as phase:
            phase.advance(3)
    assert silent.getvalue() == ""


def test_the_exporter_reports_its_phases_with_node_counts():
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    out = io.StringIO()
    graph = export(module, (torch.randn(3, 4),),
                   progress=Progress("export", stream=out, tty=False))
    lines = out.getvalue().splitlines()
    nodes = len(graph["nodes"])
    assert lines[0] == "export: tracing..."
    assert any(line.startswith("export: shapes (%d) done in " % (nodes + 1)) for line in lines)
    assert any(line.startswith("export: costs (%d) done in " % nodes) for line in lines)
