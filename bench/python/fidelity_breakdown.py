#!/usr/bin/env python3
"""Where a comm-visible job's measured step goes, and what the model misses.

Runs one job as bench/python/fidelity_bench.py does (four synthetic workers on
127.0.0.1, Gloo, 8 MB per stage boundary, devices declared at 10 TFLOP/s), then
reads its step reports (ListStepReports) and prints two tables:

1. Per rank, medians over the steps after the first: the step's makespan split
   into the rank's start skew, compute, host time posting SEND/RECV, time
   blocked in waits (inside the step and at its end), gaps between consecutive
   actions (dispatch, bookkeeping), the tail from the rank's end to the last
   rank's end, and the span between the rank's step and its next one (boundary
   votes, the report; outside the makespan the observer measures).
2. The measured steps replayed through a copy of the simulator's engine
   (planner_service/core/schedule/engine.cc semantics, lowered 1F1B or
   interleaved programs as the workers ran them), with costs taken from the
   fits or measured, so each modelling choice's share of the error shows:
   the observer's fits; host time fitted apart for SEND and RECV; links at
   their mean (line + tail); every action at its own measured duration.

  /usr/bin/python3 bench/python/fidelity_breakdown.py [--schedule 1F1B|Interleaved1F1B] [--steps 26]

Build first: pipeplan-planner, pipeplan-worker, pipeplan, pipeplan_python_stubs.
"""

import argparse
import os
import re
import statistics as st
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))

import fidelity_bench as fb  # noqa: E402
import pipeplan  # noqa: E402
from planner_process import PlannerProcess, planner_binary  # noqa: E402

ACTION = re.compile(r"^(\d+)(F|B|I|W|SEND_F|SEND_B|RECV_F|RECV_B)(\d+)$")
RANKS = 4


def parse(name):
    m = ACTION.match(name)
    return int(m.group(1)), m.group(2), int(m.group(3))


def is_message(kind):
    return kind.startswith("SEND") or kind.startswith("RECV")


def boundary_of(stage, kind):
    """The boundary (b: stages b, b + 1) a SEND/RECV crosses, and its direction."""
    if kind == "SEND_F":
        return "F", stage
    if kind == "SEND_B":
        return "B", stage - 1
    if kind == "RECV_F":
        return "F", stage - 1
    return "B", stage


def breakdown(report):
    """One rank's step: compute, posting, waits, gaps between actions."""
    waits = {}
    for t in report.timings:
        stage, kind, mb = parse(t.action)
        if kind.startswith("RECV"):
            waits[(kind[-1], stage, mb)] = t.wait_seconds
    compute = posting = waited_in_step = gaps = 0.0
    end = None
    for t in report.timings:
        stage, kind, mb = parse(t.action)
        if end is not None:
            gaps += t.start_seconds - end
        if is_message(kind):
            posting += t.seconds - t.wait_seconds
            end = t.start_seconds + t.seconds - t.wait_seconds
            continue
        # A compute action first waits for the RECV that feeds it.
        feed = ("F", stage, mb) if kind == "F" else ("B", stage, mb) if kind in "BI" else None
        wait = waits.pop(feed, 0.0)
        waited_in_step += wait
        compute += t.seconds
        end = t.start_seconds + wait + t.seconds
    all_waits = sum(t.wait_seconds for t in report.timings)
    return {"compute": compute, "posting": posting, "waits": all_waits, "gaps": gaps,
            "end_of_step": report.step_seconds - end - (all_waits - waited_in_step)}


class Replay:
    """The simulator's engine over one step's lowered programs."""

    def __init__(self, programs, stages, stage_rank):
        self.programs, self.stages, self.stage_rank = programs, stages, stage_rank

    def run(self, compute, send_host, recv_host, transfer):
        done, cursor, clock, makespan = {}, [0] * RANKS, [0.0] * RANKS, 0.0
        progress = True
        while progress:
            progress = False
            for r in range(RANKS):
                while cursor[r] < len(self.programs[r]):
                    stage, kind, mb = self.programs[r][cursor[r]]
                    if not self.step(r, stage, kind, mb, done, clock, compute, send_host,
                                     recv_host, transfer):
                        break
                    if kind.startswith("RECV"):
                        makespan = max(makespan, done[("R" + kind[-1], stage, mb)])
                    cursor[r] += 1
                    progress = True
        if any(cursor[r] < len(self.programs[r]) for r in range(RANKS)):
            raise RuntimeError("the replay deadlocked")
        return max(makespan, max(clock))

    def ready(self, r, stage, kind, mb, done):
        if kind == "F":
            if stage == 0:
                return 0.0
            if self.stage_rank[stage - 1] == r:
                return done.get(("FD", stage - 1, mb))
            return done.get(("RF", stage, mb))
        if kind in "BI":
            f = done.get(("FD", stage, mb))
            if stage == self.stages - 1:
                return f
            key = ("BD", stage + 1, mb) if self.stage_rank[stage + 1] == r else ("RB", stage, mb)
            g = done.get(key)
            return None if f is None or g is None else max(f, g)
        return done.get(("BD", stage, mb))

    def step(self, r, stage, kind, mb, done, clock, compute, send_host, recv_host, transfer):
        if not is_message(kind):
            ready = self.ready(r, stage, kind, mb, done)
            if ready is None:
                return False
            clock[r] = max(clock[r], ready) + compute(r, stage, kind, mb)
            if kind == "F":
                done[("FD", stage, mb)] = clock[r]
            elif kind != "W":
                done[("BD", stage, mb)] = clock[r]
            return True
        direction, b = boundary_of(stage, kind)
        if kind.startswith("SEND"):
            produced = done.get(("FD" if direction == "F" else "BD", stage, mb))
            if produced is None:
                return False
            post = max(clock[r], produced)
            done[("S" + direction, b, mb)] = post
            clock[r] = post + send_host(r, stage, kind, mb)
            return True
        sent = done.get(("S" + direction, b, mb))
        if sent is None:
            return False
        done[("R" + direction, stage, mb)] = max(clock[r], sent) + transfer(r, stage, kind, mb)
        clock[r] += recv_host(r, stage, kind, mb)
        return True


def robust_median(values, cutoff=3):
    """host_overhead.cc's fit: the median after dropping values beyond 3 MADs."""
    m = st.median(values)
    mad = st.median(abs(x - m) for x in values)
    return st.median([x for x in values if mad <= 0 or abs(x - m) <= cutoff * mad])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", default="1F1B", choices=["1F1B", "Interleaved1F1B"])
    parser.add_argument("--steps", type=int, default=26)
    args = parser.parse_args()
    chunks = 2 if args.schedule == "Interleaved1F1B" else 1
    work = tempfile.mkdtemp(prefix="pipeplan-fidelity-breakdown-")
    with PlannerProcess(planner_binary(), ["--replan=off"]) as planner:
        graph, cluster = fb.write_inputs(work, 8e6)
        job = fb.cli(planner, "jobs", "create", "--graph", graph, "--cluster", cluster, "--ranks",
                     str(RANKS), "--schedule", args.schedule, "--chunks-per-rank", str(chunks),
                     "--microbatches", "8", "--json")["id"]
        workers = [subprocess.Popen(
            [fb.WORKER, "--planner", planner.address, "--job", job, "--worker-id", "w%d" % r,
             "--device", "gpu%d" % r, "--transport", "gloo", "--listen-host", "127.0.0.1",
             "--max-message-bytes", str(64 << 20), "--steps", str(args.steps)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(RANKS)]
        for w in workers:
            w.wait(timeout=300)
        o = fb.observation(planner, job)
        with pipeplan.Client(planner.address) as c:
            reports = c.step_reports(job)
    steps = {}
    for r in reports:
        if r.step >= 1:  # the observer's warm-up
            steps.setdefault(r.step, {})[r.rank] = r
    steps = {s: rs for s, rs in steps.items() if len(rs) == RANKS}
    print_breakdown(steps, o)
    print_replay(steps, o, chunks)


def print_breakdown(steps, o):
    rows = {r: [] for r in range(RANKS)}
    between = {r: [] for r in range(RANKS)}
    for s, rs in steps.items():
        first = min(r.start_unix_us for r in rs.values())
        makespan = max((r.start_unix_us - first) * 1e-6 + r.step_seconds for r in rs.values())
        for rank, r in rs.items():
            d = breakdown(r)
            d["makespan"] = makespan
            d["skew"] = (r.start_unix_us - first) * 1e-6
            d["tail"] = makespan - d["skew"] - r.step_seconds
            rows[rank].append(d)
            nxt = steps.get(s + 1, {}).get(rank)
            if nxt:
                between[rank].append((nxt.start_unix_us - r.start_unix_us) * 1e-6 - r.step_seconds)
    keys = ["makespan", "skew", "compute", "posting", "waits", "gaps", "end_of_step", "tail"]
    print("measured %.4f s, predicted %.4f s, error %.1f%%, bubble %.3f / %.3f" % (
        o["measured_step_seconds"], o["predicted_step_seconds"],
        100 * o["prediction_error_ratio"], o["measured_bubble_ratio"],
        o["predicted_bubble_ratio"]))
    print("| rank | " + " | ".join(keys) + " | between steps |")
    print("|---" * (len(keys) + 2) + "|")
    for rank in range(RANKS):
        med = [st.median(d[k] for d in rows[rank]) for k in keys]
        print("| %d | " % rank + " | ".join("%.4f" % v for v in med) +
              " | %.4f |" % (st.median(between[rank]) if between[rank] else 0))


def measured_messages(steps):
    """(rank -> host time per message, both directions together: the fit before
    the split, per report all posting over all messages; (src, dst) -> mean
    measured transfer seconds of the blocked receives)."""
    per_message, measured_transfer = {}, {}
    for rs in steps.values():
        ends = {}
        for rank, r in rs.items():
            msgs = [t for t in r.timings if is_message(parse(t.action)[1])]
            posting = sum(max(0.0, t.seconds - t.wait_seconds) for t in msgs)
            per_message.setdefault(rank, []).append(posting / len(msgs))
            for t in msgs:
                stage, kind, mb = parse(t.action)
                ends.setdefault(boundary_of(stage, kind) + (mb,), {})[kind[:4]] = (t, rank)
        for e in ends.values():
            (send, src), (recv, dst) = e["SEND"], e["RECV"]
            if recv.wait_seconds >= 20e-6:  # blocked, as link_calibration.cc pairs them
                seconds = (recv.complete_unix_us - max(send.post_unix_us, recv.post_unix_us)) * 1e-6
                measured_transfer.setdefault((src, dst), []).append(seconds)
    combined = {rank: robust_median(v) for rank, v in per_message.items()}
    mean_transfer = {k: st.mean(v) for k, v in measured_transfer.items()}
    return combined, mean_transfer


def print_replay(steps, o, chunks):
    stages = RANKS * chunks
    stage_rank = [s % RANKS for s in range(stages)]
    nominal = {"F": 2e-3 / chunks, "B": 4e-3 / chunks, "I": 2e-3 / chunks, "W": 2e-3 / chunks}
    factor = {int(d["device_id"][3:]): d["time_factor"] for d in o["devices"]}
    line = {}
    for link in o["links"]:
        if link["scope"] == "pair":
            src, dst = int(link["src_device"][3:]), int(link["dst_device"][3:])
            line[(src, dst)] = link["latency_seconds"] + 8e6 / link["bandwidth_bytes_per_second"]
    host = {int(h["device_id"][3:]): h for h in o.get("host_times", [])}
    combined, mean_transfer = measured_messages(steps)

    def src(r, stage, kind):
        return stage_rank[stage - 1] if kind == "RECV_F" else stage_rank[stage + 1]

    def fitted_compute(r, stage, kind, mb):
        return nominal[kind] * factor[r]

    def fitted_line(r, stage, kind, mb):
        return line[(src(r, stage, kind), r)]

    def mean_link(r, stage, kind, mb):
        return mean_transfer[(src(r, stage, kind), r)]

    def host_both(r, stage, kind, mb):
        return combined[r]

    def host_send(r, stage, kind, mb):
        return host[r]["send_seconds"] if r in host else combined[r]

    def host_recv(r, stage, kind, mb):
        return host[r]["recv_seconds"] if r in host else combined[r]

    results = {k: [] for k in ("fits", "split", "mean", "actions", "measured")}
    for rs in steps.values():
        programs = [[parse(t.action) for t in rs[r].timings] for r in range(RANKS)]
        replay = Replay(programs, stages, stage_rank)
        first = min(r.start_unix_us for r in rs.values())
        results["measured"].append(
            max((r.start_unix_us - first) * 1e-6 + r.step_seconds for r in rs.values()))
        results["fits"].append(replay.run(fitted_compute, host_both, host_both, fitted_line))
        results["split"].append(replay.run(fitted_compute, host_send, host_recv, fitted_line))
        results["mean"].append(replay.run(fitted_compute, host_send, host_recv, mean_link))
        results["actions"].append(replay_as_measured(replay, rs, stage_rank, fitted_line))
    labels = {"fits": "links at their line, one host time per message",
              "split": "+ host time per SEND and per RECV apart",
              "mean": "+ links at their mean (line + tail)",
              "actions": "every action at its own measured duration",
              "measured": "measured makespan"}
    print("\n| replayed with | step s (median) |")
    print("|---|---|")
    for k, label in labels.items():
        print("| %s | %.4f |" % (label, st.median(results[k])))


def replay_as_measured(replay, rs, stage_rank, fitted_line):
    """The step with each action's own measured compute, posting and transfer
    (a RECV that did not block: at most its fitted time)."""
    compute, posting, transfer, ends = {}, {}, {}, {}
    for rank, r in rs.items():
        for t in r.timings:
            stage, kind, mb = parse(t.action)
            if not is_message(kind):
                compute[(stage, kind, mb)] = t.seconds
                continue
            posting[(stage, kind, mb)] = max(0.0, t.seconds - t.wait_seconds)
            ends.setdefault(boundary_of(stage, kind) + (mb,), {})[kind[:4]] = t
    for key, e in ends.items():
        send, recv = e["SEND"], e["RECV"]
        transfer[key] = ((recv.complete_unix_us - max(send.post_unix_us, recv.post_unix_us)) * 1e-6,
                         recv.wait_seconds >= 20e-6)

    def measured_transfer(r, stage, kind, mb):
        seconds, blocked = transfer[boundary_of(stage, kind) + (mb,)]
        return seconds if blocked else min(seconds, fitted_line(r, stage, kind, mb))

    return replay.run(lambda r, s, k, m: compute[(s, k, m)],
                      lambda r, s, k, m: posting[(s, k, m)],
                      lambda r, s, k, m: posting[(s, k, m)], measured_transfer)


if __name__ == "__main__":
    main()
