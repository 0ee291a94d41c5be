#!/usr/bin/env python3
"""Offline checks of deploy/ (Grafana, Kubernetes, systemd, Prometheus,
Debian maintainer scripts, Dockerfiles).

    python3 tests/deploy/check_deploy.py [REPO_ROOT]

Standard library only. Optional tools are used when present and skipped with
a message otherwise: PyYAML (YAML parsing and the structural Kubernetes
checks; without it a line-based fallback runs), systemd-analyze, promtool,
kubectl (kustomize build only, no cluster). Exit status 0 when every check
passes, 1 otherwise. Registered with CTest as `deploy_files_check`.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")

# Metric sources: every prometheus-cpp Build*().Name("...") in these trees.
METRIC_SOURCES = ["planner_service", "worker_daemon"]
# Being added to the planner concurrently; the dashboard may use them before
# they exist in the code (the check then says so and skips them).
OPTIONAL_METRICS = {"pipeplan_replans_total", "pipeplan_calibration_factor"}
# Series Prometheus itself makes.
PROMETHEUS_METRICS = {"up"}
# Label names the dashboard and rules may use: the code's labels, the target
# labels, `exported_job` (the exposed `job` renamed by Prometheus), `le`.
KNOWN_LABELS = {"job", "exported_job", "instance", "worker", "method", "code", "state",
                "result", "le", "version", "reason", "device", "node", "kind"}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
                   "and", "or", "unless", "offset", "atan2", "inf", "nan"}
PROMQL_AGGREGATIONS = {"sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk",
                       "bottomk", "quantile", "count_values", "group"}

failures = []
skips = []
passes = 0


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def skip(msg):
    skips.append(msg)
    print("SKIP: " + msg)


def ok(msg):
    global passes
    passes += 1
    print("ok:   " + msg)


def rel(path):
    return os.path.relpath(path, ROOT)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def deploy_files(*exts):
    out = []
    for d, _, files in os.walk(DEPLOY):
        for f in sorted(files):
            if f.endswith(exts):
                out.append(os.path.join(d, f))
    return sorted(out)


try:
    import yaml  # noqa: F401
    HAVE_YAML = True
except ImportError:
    HAVE_YAML = False


# ---------------------------------------------------------------- metrics ---

def code_metrics():
    """{name: kind} for every Build<Kind>().Name("pipeplan_...") in the code."""
    found = {}
    pat = re.compile(r'Build(Counter|Gauge|Histogram|Summary)\(\)\s*\.Name\(\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"')
    # The registration helpers: Add<Kind>(registry, "name", ...) in the
    # worker, <Kind>Family(registry, "name", ...) in the planner.
    helper = re.compile(r'(?:Add(Gauge|Counter|Histogram)|(Gauge|Counter)Family)'
                        r'\(\s*[\w*]+\s*,\s*"(pipeplan_[a-zA-Z0-9_]*)"')
    for top in METRIC_SOURCES:
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".cc", ".h", ".cpp")):
                    text = read(os.path.join(d, f))
                    for kind, name in pat.findall(text):
                        found[name] = kind.lower()
                    for add_kind, family_kind, name in helper.findall(text):
                        found[name] = (add_kind or family_kind).lower()
    return found


def series_names(metrics):
    names = set(PROMETHEUS_METRICS)
    for name, kind in metrics.items():
        names.add(name)
        if kind in ("histogram", "summary"):
            names.update({name + "_sum", name + "_count"})
        if kind == "histogram":
            names.add(name + "_bucket")
    return names


def strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)


def promql_refs(expr):
    """(metric names, label names) referenced by a PromQL expression."""
    e = strip_strings(expr)
    labels = set()
    for body in re.findall(r"\{([^}]*)\}", e):
        labels.update(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", body))
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    for kw, body in re.findall(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", e):
        labels.update(x.strip() for x in body.split(",") if x.strip())
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " \\1 ", e)
    e = re.sub(r"\$\{?[a-zA-Z_][a-zA-Z0-9_]*\}?", " 1 ", e)  # Grafana variables
    metrics = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word in PROMQL_KEYWORDS or word in PROMQL_AGGREGATIONS:
            continue
        if re.fullmatch(r"[0-9.eE+-]+[smhdwy]?", word):
            continue
        metrics.add(word)
    return metrics, labels


def check_refs(where, expr, known, present_optional):
    metrics, labels = promql_refs(expr)
    good = True
    for m in sorted(metrics):
        base = re.sub(r"_(bucket|sum|count)$", "", m)
        if m in known:
            continue
        if base in OPTIONAL_METRICS or m in OPTIONAL_METRICS:
            if (base if base in OPTIONAL_METRICS else m) not in present_optional:
                continue  # reported once, below
        fail(f"{where}: metric {m!r} is not registered in {', '.join(METRIC_SOURCES)} "
             f"(expr: {expr})")
        good = False
    for label in sorted(labels - KNOWN_LABELS):
        fail(f"{where}: unknown label {label!r} (expr: {expr})")
        good = False
    return good, metrics


# -------------------------------------------------------------- dashboard ---

def check_json_files():
    for path in deploy_files(".json"):
        try:
            json.loads(read(path))
            ok(f"{rel(path)} is valid JSON")
        except ValueError as e:
            fail(f"{rel(path)}: invalid JSON: {e}")


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def check_dashboard(known, present_optional):
    path = os.path.join(DEPLOY, "grafana", "pipeplan-dashboard.json")
    if not os.path.exists(path):
        fail(f"{rel(path)} is missing")
        return
    try:
        dash = json.loads(read(path))
    except ValueError:
        return  # already reported
    if not 36 <= dash.get("schemaVersion", 0) <= 41:
        fail(f"{rel(path)}: schemaVersion {dash.get('schemaVersion')} (want 36..41)")
    if not dash.get("uid") or not dash.get("title"):
        fail(f"{rel(path)}: needs a uid and a title")

    variables = {v.get("name"): v for v in dash.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        fail(f"{rel(path)}: needs a `datasource` variable of type datasource, query prometheus")
    else:
        ok("dashboard has a prometheus `datasource` variable")

    used_metrics = set()
    all_good = True
    for name, v in variables.items():
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        m = re.fullmatch(r"\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*", q)
        if not m:
            fail(f"{rel(path)}: variable {name}: expected label_values(...), got {q!r}")
            all_good = False
            continue
        if (v.get("datasource") or {}).get("uid") != "${datasource}":
            fail(f"{rel(path)}: variable {name} does not use ${{datasource}}")
            all_good = False
        good, ms = check_refs(f"variable {name}", m.group(1), known, present_optional)
        good2 = m.group(2) in KNOWN_LABELS
        if not good2:
            fail(f"{rel(path)}: variable {name}: unknown label {m.group(2)!r}")
        all_good &= good and good2
        used_metrics |= ms
    for want in ("training_job", "device"):
        if want not in variables:
            fail(f"{rel(path)}: no `{want}` variable")
            all_good = False

    ids = set()
    n_targets = 0
    titles = []
    for p in walk_panels(dash.get("panels", [])):
        pid = p.get("id")
        if pid in ids:
            fail(f"{rel(path)}: duplicate panel id {pid}")
            all_good = False
        ids.add(pid)
        gp = p.get("gridPos", {})
        if not all(k in gp for k in "hwxy") or gp["x"] + gp["w"] > 24:
            fail(f"{rel(path)}: panel {p.get('title')!r} has a bad gridPos {gp}")
            all_good = False
        if p.get("type") in ("row", "text"):
            continue
        titles.append(p.get("title", ""))
        if (p.get("datasource") or {}).get("uid") != "${datasource}":
            fail(f"{rel(path)}: panel {p.get('title')!r} does not use ${{datasource}}")
            all_good = False
        if not p.get("targets"):
            fail(f"{rel(path)}: panel {p.get('title')!r} has no targets")
            all_good = False
        for t in p.get("targets", []):
            n_targets += 1
            expr = t.get("expr", "")
            for var in re.findall(r"\$\{?([a-zA-Z_][a-zA-Z0-9_]*)", expr):
                if not var.startswith("__") and var not in variables:
                    fail(f"{rel(path)}: panel {p.get('title')!r} uses undefined ${var}")
                    all_good = False
            good, ms = check_refs(f"panel {p.get('title')!r}", expr, known, present_optional)
            all_good &= good
            used_metrics |= ms
    wanted = ["pipeplan_worker_step_seconds_bucket", "pipeplan_worker_steps_total",
              "pipeplan_plan_version", "pipeplan_plan_requests_total",
              "pipeplan_solve_duration_seconds_bucket", "pipeplan_solver_gap_ratio",
              "pipeplan_jobs", "pipeplan_workers", "pipeplan_plan_cache_lookups_total",
              "pipeplan_replans_total", "pipeplan_calibration_factor"]
    for w in wanted:
        if w not in used_metrics:
            fail(f"{rel(path)}: no panel uses {w}")
            all_good = False
    if all_good:
        ok(f"dashboard: {len(ids)} panels, {n_targets} queries; every metric and label "
           "exists in the code")


def check_rules(known, present_optional):
    path = os.path.join(DEPLOY, "prometheus", "alerts.yml")
    text = read(path)
    exprs = []
    if HAVE_YAML:
        import yaml
        for g in yaml.safe_load(text).get("groups", []):
            for r in g.get("rules", []):
                exprs.append((r.get("alert") or r.get("record"), r["expr"]))
    else:
        for m in re.finditer(r"- alert: (\S+)\s+expr: (?:\|\n((?:\s{10,}.*\n)+)|(.*))", text):
            exprs.append((m.group(1), m.group(2) or m.group(3)))
    good = all(check_refs(f"alerts.yml {a}", e, known, present_optional)[0] for a, e in exprs)
    if good and exprs:
        ok(f"alerts.yml: {len(exprs)} rules reference only registered metrics")


# ------------------------------------------------------------------- YAML ---

def load_yaml_docs(path):
    import yaml
    return [d for d in yaml.safe_load_all(read(path)) if d is not None]


def minimal_yaml_check(path):
    """Without PyYAML: tabs in indentation, unbalanced brackets and quotes."""
    problems = []
    depth = 0
    for i, line in enumerate(read(path).splitlines(), 1):
        if "\t" in line[: len(line) - len(line.lstrip())]:
            problems.append(f"line {i}: tab in indentation")
        if line.lstrip().startswith("#"):
            continue
        s = strip_strings(line.split(" #")[0])
        if s.count('"') % 2 or s.count("'") % 2:
            problems.append(f"line {i}: unbalanced quote")
        depth += s.count("[") + s.count("{") - s.count("]") - s.count("}")
        if depth < 0:
            problems.append(f"line {i}: closing bracket without an opening one")
            depth = 0
    if depth:
        problems.append("unclosed [ or { at the end")
    return problems


def check_yaml_files():
    files = deploy_files(".yml", ".yaml")
    if not HAVE_YAML:
        skip("PyYAML not importable: YAML files get only a line-based check "
             "(pip install pyyaml for full parsing)")
    for path in files:
        if HAVE_YAML:
            try:
                load_yaml_docs(path)
                ok(f"{rel(path)} parses as YAML")
            except Exception as e:  # yaml.YAMLError and friends
                fail(f"{rel(path)}: YAML error: {e}")
        else:
            problems = minimal_yaml_check(path)
            if problems:
                fail(f"{rel(path)}: " + "; ".join(problems))
            else:
                ok(f"{rel(path)}: line-based YAML check")


# ------------------------------------------------------------- Kubernetes ---

def k8s_docs():
    docs = []
    for path in deploy_files(".yml", ".yaml"):
        if os.sep + "k8s" + os.sep not in path:
            continue
        for d in load_yaml_docs(path):
            if isinstance(d, dict) and "kind" in d:
                docs.append((path, d))
    return docs


def container_checks(where, pod, need_ports):
    good = True
    psc = pod.get("securityContext", {})
    for c in pod.get("containers", []):
        sc = c.get("securityContext", {})
        name = f"{where} container {c.get('name')}"
        if "ALL" not in (sc.get("capabilities", {}).get("drop") or []):
            fail(f"{name}: capabilities.drop must contain ALL")
            good = False
        if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
            fail(f"{name}: runAsNonRoot is not set")
            good = False
        if sc.get("readOnlyRootFilesystem") is not True:
            fail(f"{name}: readOnlyRootFilesystem is not true")
            good = False
        if sc.get("allowPrivilegeEscalation") is not False:
            fail(f"{name}: allowPrivilegeEscalation is not false")
            good = False
        res = c.get("resources", {})
        if not res.get("requests") or not res.get("limits"):
            fail(f"{name}: needs resource requests and limits")
            good = False
        ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
        for p in need_ports:
            if p not in ports:
                fail(f"{name}: no port named {p!r}")
                good = False
    return good


def secret_unreadable(pod):
    """Why a container of `pod` cannot read a secret volume it mounts, or None.
    Kubernetes writes secret files owned by root, group fsGroup (root without
    one), with the volume's defaultMode (0644 when unset)."""
    psc = pod.get("securityContext", {})
    volumes = {v["name"]: v for v in pod.get("volumes", []) if "secret" in v}
    for c in pod.get("containers", []):
        sc = c.get("securityContext", {})
        uid = sc.get("runAsUser", psc.get("runAsUser"))
        for m in c.get("volumeMounts", []):
            v = volumes.get(m["name"])
            if v is None:
                continue
            mode = v["secret"].get("defaultMode", 0o644)
            readable = (mode & 0o004 or (mode & 0o040 and psc.get("fsGroup") is not None)
                        or (uid == 0 and mode & 0o400))
            if not readable:
                return (f"container {c.get('name')} (uid {uid}) cannot read secret volume "
                        f"{m['name']} (mode {mode:#o}, fsGroup {psc.get('fsGroup')}): set "
                        "fsGroup or a world-readable mode")
    return None


def arg_value(args, flag):
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args):
            return args[i + 1]
    return None


def check_k8s():
    kdir = os.path.join(DEPLOY, "k8s")
    if not os.path.isdir(kdir):
        fail("deploy/k8s is missing")
        return
    if not HAVE_YAML:
        # Line-based fallback: the essentials are present in the text.
        dep = read(os.path.join(kdir, "planner-deployment.yaml"))
        ds = read(os.path.join(kdir, "worker-daemonset.yaml"))
        good = True
        for f, text, needs in (
                ("planner-deployment.yaml", dep, [r"name: grpc", r"name: metrics",
                                                  r"drop:\s*\n\s*- ALL", r"runAsNonRoot: true",
                                                  r"readOnlyRootFilesystem: true", r"grpc:\s*\n\s*port:"]),
                ("worker-daemonset.yaml", ds, [r"name: metrics", r"drop:\s*\n\s*- ALL",
                                               r"nvidia.com/gpu: 1", r"fieldPath: spec.nodeName"])):
            for n in needs:
                if not re.search(n, text):
                    fail(f"deploy/k8s/{f}: missing {n!r}")
                    good = False
        if good:
            ok("k8s manifests: line-based checks (ports, capabilities, probes, GPU, NODE_NAME)")
        return

    import yaml
    docs = k8s_docs()
    by_kind = {}
    for path, d in docs:
        by_kind.setdefault(d["kind"], []).append((path, d))

    # kustomization: every resource exists, the Secret template is not applied.
    kust = yaml.safe_load(read(os.path.join(kdir, "kustomization.yaml")))
    good = True
    for r in kust.get("resources", []):
        if not os.path.exists(os.path.join(kdir, r)):
            fail(f"deploy/k8s/kustomization.yaml: resource {r} does not exist")
            good = False
        elif any(d.get("kind") == "Secret" for d in load_yaml_docs(os.path.join(kdir, r))):
            fail(f"deploy/k8s/kustomization.yaml: {r} holds a Secret; keep secrets out of the base")
            good = False
    for mk in ("monitoring/kustomization.yaml",):
        p = os.path.join(kdir, mk)
        for r in yaml.safe_load(read(p)).get("resources", []):
            if not os.path.exists(os.path.join(os.path.dirname(p), r)):
                fail(f"deploy/k8s/{mk}: resource {r} does not exist")
                good = False
    if good:
        ok("kustomization resources exist and hold no Secret")

    # Secrets: placeholders only.
    good = True
    for path, d in by_kind.get("Secret", []):
        for k, v in (d.get("stringData") or {}).items():
            if not str(v).startswith("<REPLACE"):
                fail(f"{rel(path)}: Secret {d['metadata']['name']} key {k} is not a <REPLACE...> placeholder")
                good = False
        if d.get("data"):
            fail(f"{rel(path)}: Secret {d['metadata']['name']} has base64 `data`; templates use placeholders")
            good = False
    if good and by_kind.get("Secret"):
        ok(f"{len(by_kind['Secret'])} Secret templates hold placeholders only")

    # Planner Deployment.
    deps = [d for p, d in by_kind.get("Deployment", []) if d["metadata"]["name"] == "pipeplan-planner"
            and "replicas" in d["spec"]]
    if len(deps) != 1:
        fail("expected one Deployment pipeplan-planner")
    else:
        d = deps[0]
        pod = d["spec"]["template"]["spec"]
        good = container_checks("Deployment pipeplan-planner", pod, ["grpc", "metrics"])
        c = pod["containers"][0]
        grpc_port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
        for probe in ("readinessProbe", "livenessProbe"):
            pr = c.get(probe, {})
            if (pr.get("grpc") or {}).get("port") != grpc_port:
                fail(f"planner {probe}: want a grpc probe on the grpc port {grpc_port}, got {pr}")
                good = False
        if d["spec"].get("replicas") != 1 or d["spec"].get("strategy", {}).get("type") != "Recreate":
            fail("planner: want replicas 1 and strategy Recreate (one SQLite writer)")
            good = False
        drain = float(arg_value(c.get("args", []), "--drain-seconds") or 1)
        grace = pod.get("terminationGracePeriodSeconds", 30)
        if not grace > drain + 5:
            fail(f"planner: terminationGracePeriodSeconds {grace} must exceed drain {drain} + 5 s shutdown")
            good = False
        data_dir = arg_value(c.get("args", []), "--data-dir")
        vols = {v["name"]: v for v in pod.get("volumes", [])}
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        if data_dir not in mounts or "persistentVolumeClaim" not in vols.get(mounts[data_dir], {}):
            fail(f"planner: --data-dir {data_dir} is not a PVC mount")
            good = False
        if good:
            ok("planner Deployment: ports grpc/metrics, gRPC probes, non-root, read-only root, "
               f"drop ALL, resources, PVC data dir, grace {grace}s > drain {drain:g}s + 5s")

    # Planner Service.
    svcs = [d for p, d in by_kind.get("Service", []) if d["metadata"]["name"] == "pipeplan-planner"]
    if not svcs or {p.get("name") for p in svcs[0]["spec"]["ports"]} != {"grpc", "metrics"}:
        fail("Service pipeplan-planner must have ports named grpc and metrics")
    else:
        ok("Service pipeplan-planner exposes grpc and metrics")

    # Workers.
    dss = by_kind.get("DaemonSet", [])
    if not dss:
        fail("no worker DaemonSet")
    for path, d in dss:
        pod = d["spec"]["template"]["spec"]
        good = container_checks(f"DaemonSet {d['metadata']['name']}", pod, ["metrics"])
        c = pod["containers"][0]
        for kind in ("requests", "limits"):
            if str(c.get("resources", {}).get(kind, {}).get("nvidia.com/gpu")) != "1":
                fail(f"{rel(path)}: nvidia.com/gpu {kind} must be 1")
                good = False
        env = {e["name"]: e for e in c.get("env", [])}
        if (env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {})
                .get("fieldPath")) != "spec.nodeName":
            fail(f"{rel(path)}: NODE_NAME must come from fieldRef spec.nodeName")
            good = False
        args = c.get("args", [])
        mport = {p["name"]: p["containerPort"] for p in c["ports"]}.get("metrics")
        ml = arg_value(args, "--metrics-listen") or ""
        if not ml.endswith(f":{mport}"):
            fail(f"{rel(path)}: --metrics-listen {ml} does not serve the metrics port {mport}")
            good = False
        if "$(NODE_NAME)" not in (arg_value(args, "--device") or ""):
            fail(f"{rel(path)}: --device should be derived from $(NODE_NAME)")
            good = False
        if good:
            ok(f"DaemonSet {d['metadata']['name']}: metrics port, 1 GPU, NODE_NAME, hardening")

    # Every pod can read the secrets it mounts (files are owned by root:
    # readable through world bits, through fsGroup's group bits, or as root).
    # A patch (patches/) is checked as merged onto its base object.
    good = True
    for kind in ("Deployment", "DaemonSet"):
        base = {d["metadata"]["name"]: d["spec"]["template"]["spec"]
                for path, d in by_kind.get(kind, []) if os.sep + "patches" + os.sep not in path}
        for path, d in by_kind.get(kind, []):
            pod = dict(d["spec"]["template"]["spec"])
            if os.sep + "patches" + os.sep in path:
                under = base.get(d["metadata"]["name"], {})
                pod["securityContext"] = {**under.get("securityContext", {}),
                                          **pod.get("securityContext", {})}
                pod["volumes"] = under.get("volumes", []) + pod.get("volumes", [])
            problem = secret_unreadable(pod)
            if problem:
                fail(f"{rel(path)}: {kind} {d['metadata']['name']}: {problem}")
                good = False
    if good:
        ok("every pod can read the secrets it mounts (mode vs runAsUser/fsGroup)")

    # Monitoring: the monitors select the right objects, the rule mirrors alerts.yml.
    good = True
    for path, d in by_kind.get("ServiceMonitor", []) + by_kind.get("PodMonitor", []):
        eps = d["spec"].get("endpoints") or d["spec"].get("podMetricsEndpoints") or []
        if not eps or any(e.get("port") != "metrics" for e in eps):
            fail(f"{rel(path)}: endpoints must scrape the port named metrics")
            good = False
    rules = by_kind.get("PrometheusRule", [])
    alerts = yaml.safe_load(read(os.path.join(DEPLOY, "prometheus", "alerts.yml")))
    for path, d in rules:
        if d["spec"].get("groups") != alerts.get("groups"):
            fail(f"{rel(path)}: spec.groups differs from deploy/prometheus/alerts.yml (regenerate it)")
            good = False
    if good and rules:
        ok("ServiceMonitor/PodMonitor scrape `metrics`; PrometheusRule equals alerts.yml")


def replicated_docs():
    """deploy/k8s-replicated as applied: built by kubectl kustomize when it is
    installed, else the overlay's own files (its patch checked alone)."""
    import yaml
    kubectl = shutil.which("kubectl")
    if kubectl:
        r = subprocess.run([kubectl, "kustomize", os.path.join(DEPLOY, "k8s-replicated")],
                           capture_output=True, text=True, timeout=60)
        if r.returncode == 0:
            return [d for d in yaml.safe_load_all(r.stdout) if isinstance(d, dict)], True
    docs = []
    for path in deploy_files(".yaml"):
        if os.sep + "k8s-replicated" + os.sep in path and not path.endswith("kustomization.yaml"):
            docs += [d for d in load_yaml_docs(path) if isinstance(d, dict) and "kind" in d]
    return docs, False


def check_k8s_replicated():
    """Replicated planners (issue 15): 3 planner replicas on PostgreSQL from
    a Secret, gRPC readiness, a PodDisruptionBudget of 2, no SQLite volume;
    and the single-pod PostgreSQL for trials."""
    rdir = os.path.join(DEPLOY, "k8s-replicated")
    if not os.path.isdir(rdir):
        fail("deploy/k8s-replicated is missing")
        return
    if not HAVE_YAML:
        skip("PyYAML not found: deploy/k8s-replicated not checked")
        return
    docs, built = replicated_docs()
    good = True
    deps = [d for d in docs if d.get("kind") == "Deployment"
            and d["metadata"]["name"] == "pipeplan-planner"]
    if len(deps) != 1:
        fail("deploy/k8s-replicated: want one Deployment pipeplan-planner")
        return
    d = deps[0]
    pod = d["spec"]["template"]["spec"]
    c = pod["containers"][0]
    args = c.get("args", [])
    env = {e["name"]: e for e in c.get("env", [])}
    if d["spec"].get("replicas") != 3 or d["spec"].get("strategy", {}).get("type") != "RollingUpdate":
        fail("k8s-replicated planner: want replicas 3 and strategy RollingUpdate")
        good = False
    store = arg_value(args, "--store") or ""
    m = re.fullmatch(r"\$\((\w+)\)", store)
    if not m or "secretKeyRef" not in (env.get(m.group(1), {}).get("valueFrom") or {}):
        fail(f"k8s-replicated planner: --store must be $(VAR) with VAR from a Secret, got {store!r}")
        good = False
    if "secretKeyRef" not in (env.get("PGPASSWORD", {}).get("valueFrom") or {}):
        fail("k8s-replicated planner: PGPASSWORD must come from a Secret")
        good = False
    if arg_value(args, "--data-dir") is not None:
        fail("k8s-replicated planner: --data-dir has no place beside --store")
        good = False
    unknown = used_flags(" ".join(args)) - declared_flags("planner_service/server/main.cc")
    if unknown:
        fail(f"k8s-replicated planner: pipeplan-planner has no flag {sorted(unknown)}")
        good = False
    if built:
        good = container_checks("k8s-replicated Deployment pipeplan-planner", pod,
                                ["grpc", "metrics"]) and good
        grpc_port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
        if (c.get("readinessProbe", {}).get("grpc") or {}).get("port") != grpc_port:
            fail("k8s-replicated planner: readiness must be the gRPC health check on the grpc port")
            good = False
        if any("persistentVolumeClaim" in v for v in pod.get("volumes", [])):
            fail("k8s-replicated planner: still mounts a PVC (SQLite); replicas share PostgreSQL")
            good = False
        if any(x.get("kind") == "PersistentVolumeClaim" for x in docs):
            fail("k8s-replicated: the SQLite PersistentVolumeClaim is still applied")
            good = False
    pdbs = [x for x in docs if x.get("kind") == "PodDisruptionBudget"]
    labels = (d["spec"]["template"].get("metadata") or {}).get("labels") or {
        "app.kubernetes.io/name": "pipeplan-planner"}
    if (len(pdbs) != 1 or pdbs[0]["spec"].get("minAvailable") != 2
            or not pdbs[0]["spec"].get("selector", {}).get("matchLabels")
            or any(labels.get(k) != v
                   for k, v in pdbs[0]["spec"]["selector"]["matchLabels"].items())):
        fail("k8s-replicated: want one PodDisruptionBudget, minAvailable 2, selecting the planner")
        good = False
    if good:
        ok("k8s-replicated: 3 planner replicas, --store and PGPASSWORD from a Secret, gRPC "
           "readiness, PDB minAvailable 2, no SQLite volume"
           + ("" if built else " (patch only: kubectl not found)"))

    # The trial PostgreSQL: one hardened pod, a Service, and the note that
    # production uses an operator or a managed instance.
    tdir = os.path.join(DEPLOY, "k8s", "postgres-trial")
    good = True
    tdocs = [x for x in load_yaml_docs(os.path.join(tdir, "postgres.yaml"))
             if isinstance(x, dict) and "kind" in x]
    sts = [x for x in tdocs if x["kind"] == "StatefulSet"]
    svc = [x for x in tdocs if x["kind"] == "Service"]
    if len(sts) != 1 or sts[0]["spec"].get("replicas") != 1 or not svc:
        fail("k8s/postgres-trial: want one StatefulSet of 1 replica and its Service")
        return
    good = container_checks("k8s/postgres-trial StatefulSet", sts[0]["spec"]["template"]["spec"],
                            ["postgres"])
    note = read(os.path.join(tdir, "kustomization.yaml"))
    if "operator" not in note or "managed" not in note:
        fail("k8s/postgres-trial/kustomization.yaml: say that production uses an operator or a "
             "managed PostgreSQL")
        good = False
    if good:
        ok("k8s/postgres-trial: one hardened PostgreSQL pod and Service, marked trial-only")


def check_kustomize():
    kubectl = shutil.which("kubectl")
    if not kubectl:
        skip("kubectl not found: kustomize build not checked")
        return
    for d in ("k8s", os.path.join("k8s", "monitoring"), "k8s-replicated",
              os.path.join("k8s", "postgres-trial")):
        r = subprocess.run([kubectl, "kustomize", os.path.join(DEPLOY, d)],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            fail(f"kubectl kustomize deploy/{d}: {r.stderr.strip()}")
        else:
            ok(f"kubectl kustomize deploy/{d} builds ({r.stdout.count('kind:')} objects)")


# ---------------------------------------------------------------- systemd ---

SYSTEMD_REQUIRED = ["Type=simple", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
                    "PrivateTmp=yes", "Restart=on-failure", "KillSignal=SIGTERM", "TimeoutStopSec=",
                    "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX", "CapabilityBoundingSet="]


def check_systemd():
    sdir = os.path.join(DEPLOY, "systemd")
    units = {"pipeplan-planner.service": "pipeplan-planner.service",
             "pipeplan-worker@.service": "pipeplan-worker@0.service"}
    for u in units:
        text = read(os.path.join(sdir, u))
        missing = [k for k in SYSTEMD_REQUIRED if not re.search(r"^" + re.escape(k), text, re.M)]
        if not re.search(r"^(DynamicUser=yes|User=pipeplan)$", text, re.M):
            missing.append("DynamicUser=yes or User=pipeplan")
        if u.startswith("pipeplan-planner") and "StateDirectory=pipeplan" not in text:
            missing.append("StateDirectory=pipeplan")
        if missing:
            fail(f"deploy/systemd/{u}: missing {missing}")
        else:
            ok(f"deploy/systemd/{u}: hardening and restart directives present")

    sa = shutil.which("systemd-analyze")
    if not sa:
        skip("systemd-analyze not found: unit files not verified")
        return
    with tempfile.TemporaryDirectory() as tmp:
        # Verify copies whose ExecStart points at stand-in executables, so the
        # check does not depend on /usr/local/bin/pipeplan-* being installed.
        bindir = os.path.join(tmp, "bin")
        os.mkdir(bindir)
        for b in ("pipeplan-planner", "pipeplan-worker"):
            with open(os.path.join(bindir, b), "w") as f:
                f.write("#!/bin/sh\nexit 0\n")
            os.chmod(os.path.join(bindir, b), 0o755)
        paths = []
        for src, inst in units.items():
            text = read(os.path.join(sdir, src)).replace("/usr/local/bin/", bindir + "/")
            p = os.path.join(tmp, inst)
            with open(p, "w") as f:
                f.write(text)
            paths.append(p)
        env = dict(os.environ, SYSTEMD_LOG_LEVEL="notice")
        r = subprocess.run([sa, "verify"] + paths, capture_output=True, text=True,
                           timeout=60, env=env, cwd=tmp)
        out = (r.stdout + r.stderr).strip()
        if r.returncode != 0 or out:
            fail(f"systemd-analyze verify (rc {r.returncode}): {out}")
        else:
            ok("systemd-analyze verify: both units clean")


# ------------------------------------------------------------- Prometheus ---

def check_prometheus():
    path = os.path.join(DEPLOY, "prometheus", "prometheus.yml")
    config = "\n".join(l for l in read(path).splitlines() if not l.lstrip().startswith("#"))
    # tests/integration/prometheus_scrape_test.cc replaces each exactly once.
    good = True
    for line in ("scrape_interval: 15s", "evaluation_interval: 15s", "- 127.0.0.1:7601"):
        if config.count(line) != 1:
            fail(f"{rel(path)}: {line!r} must occur exactly once (prometheus_scrape_test substitutes it)")
            good = False
    if "job_name: pipeplan-planner" not in config or "job_name: pipeplan-worker" not in config:
        fail(f"{rel(path)}: needs the pipeplan-planner and pipeplan-worker scrape jobs")
        good = False
    if good:
        ok("prometheus.yml keeps the substituted lines and scrapes planner and workers")
    promtool = shutil.which("promtool")
    if not promtool:
        skip("promtool not found: prometheus.yml and alerts not checked with promtool")
        return
    pdir = os.path.dirname(path)
    for args in (["check", "config", "prometheus.yml"], ["test", "rules", "alerts_test.yml"]):
        r = subprocess.run([promtool] + args, capture_output=True, text=True, timeout=120, cwd=pdir)
        if r.returncode != 0:
            fail(f"promtool {' '.join(args)}: {(r.stdout + r.stderr).strip()}")
        else:
            ok(f"promtool {' '.join(args)}")


# ------------------------------------------------------------------- docs ---

def check_docs():
    path = os.path.join(ROOT, "docs", "operations.md")
    if not os.path.exists(path):
        fail("docs/operations.md is missing")
        return
    text = read(path)
    missing = [m for m in sorted(code_metrics()) if m not in text]
    if missing:
        fail(f"docs/operations.md does not mention {missing}")
    else:
        ok("docs/operations.md mentions every registered metric")

# ------------------------------------------- flags, exit codes, packages ---

FLAG_PATTERN = r'(?:\.|->)(?:Value|Switch)\(\s*"([a-z0-9-]+)"'
# Flag groups declared once in common/ for several programs: helper -> its file.
SHARED_FLAG_HELPERS = {"AddPlannerCredentialFlags": os.path.join("common", "flag_set.cc")}


def declared_flags(source):
    """Flags a daemon declares: .Value("name", ...) / .Switch("name", ...) in its
    main.cc, and those of the shared flag helpers it calls."""
    text = read(os.path.join(ROOT, source))
    flags = set(re.findall(FLAG_PATTERN, text))
    for helper, path in SHARED_FLAG_HELPERS.items():
        if helper + "(" not in text:
            continue
        body = re.search(r"\n\w[^\n]*\b%s\([^)]*\)\s*\{(.*?)\n\}" % helper,
                         read(os.path.join(ROOT, path)), re.S)
        if body is None:
            fail(f"{path}: found no definition of {helper}; did it move?")
            continue
        flags |= set(re.findall(FLAG_PATTERN, body.group(1)))
    return flags


def exit_codes():
    text = read(os.path.join(ROOT, "common", "include", "pipeplan", "common",
                             "exit_code.h"))
    return {name: int(value) for name, value in re.findall(r"\b(kExit\w+) = (\d+)", text)}


def used_flags(text):
    return set(re.findall(r"(?<![\w-])--([a-z][a-z0-9-]*)", text))


def check_daemon_flags():
    """Every flag deploy/ passes to a daemon is one it declares, and workers
    default to --transport auto."""
    daemons = {"pipeplan-planner": declared_flags("planner_service/server/main.cc"),
               "pipeplan-worker": declared_flags("worker_daemon/main.cc")}
    if not all(daemons.values()):
        fail("found no flag declarations in the daemons' main.cc; did they move?")
        return
    good = True
    sdir = os.path.join(DEPLOY, "systemd")
    for daemon, unit, env in (("pipeplan-planner", "pipeplan-planner.service", "planner.env.example"),
                              ("pipeplan-worker", "pipeplan-worker@.service", "worker.env.example")):
        for f in (unit, env):
            text = read(os.path.join(sdir, f))
            if f == unit:
                text = text[text.index("ExecStart="):].split("\n\n")[0].split("Restart=")[0]
            else:
                text = "\n".join(l for l in text.splitlines() if not l.lstrip().startswith("#"))
            unknown = used_flags(text) - daemons[daemon]
            if unknown:
                fail(f"deploy/systemd/{f}: {daemon} has no flag {sorted(unknown)}")
                good = False
    for path in deploy_files(".yaml"):
        if os.sep + "k8s" + os.sep not in path:
            continue
        for d in load_yaml_docs(path) if HAVE_YAML else []:
            pod = (((d or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
            for c in pod.get("containers", []):
                daemon = os.path.basename((c.get("command") or [""])[0])
                if daemon in daemons:
                    unknown = used_flags(" ".join(c.get("args", []))) - daemons[daemon]
                    if unknown:
                        fail(f"{rel(path)}: {daemon} has no flag {sorted(unknown)}")
                        good = False
    for f in ("planner.Dockerfile", "worker.Dockerfile"):
        text = read(os.path.join(DEPLOY, "docker", f))
        daemon = "pipeplan-" + f.split(".")[0]
        cmd = "\n".join(l for l in text.splitlines() if l.startswith(("CMD", "ENTRYPOINT")))
        unknown = used_flags(cmd) - daemons[daemon]
        if unknown:
            fail(f"deploy/docker/{f}: {daemon} has no flag {sorted(unknown)}")
            good = False
    transports = {"k8s ConfigMap": re.search(r"^\s*transport:\s*(\S+)",
                                             read(os.path.join(DEPLOY, "k8s", "worker-config.yaml")), re.M),
                  "worker unit": re.search(r"^Environment=PIPEPLAN_TRANSPORT=(\S+)",
                                           read(os.path.join(sdir, "pipeplan-worker@.service")), re.M),
                  "worker.env.example": re.search(r"^PIPEPLAN_TRANSPORT=(\S+)",
                                                  read(os.path.join(sdir, "worker.env.example")), re.M)}
    for where, m in transports.items():
        if not m or m.group(1) != "auto":
            fail(f"{where}: the worker transport should default to auto, got {m and m.group(1)}")
            good = False
    if good:
        ok("every daemon flag in deploy/ is declared by the daemon; workers default to "
           "--transport auto")


def check_exit_codes():
    """The units restart exactly what a restart can fix (docs/cli.md)."""
    codes = exit_codes()
    if not {"kExitUsage", "kExitNotFound", "kExitUnavailable"} <= set(codes):
        fail(f"pipeplan/common/exit_code.h: exit codes not found ({codes})")
        return
    # Workers: bad flags, and a job that is gone or failed for good.
    worker_final = {codes["kExitUsage"], codes["kExitNotFound"]}
    if "kExitJobFailed" in codes:
        worker_final.add(codes["kExitJobFailed"])
    want = {"pipeplan-planner.service": {codes["kExitUsage"]},
            "pipeplan-worker@.service": worker_final}
    good = True
    for unit, codes_wanted in want.items():
        m = re.search(r"^RestartPreventExitStatus=(.*)$", read(os.path.join(DEPLOY, "systemd", unit)),
                      re.M)
        got = {int(x) for x in m.group(1).split()} if m else set()
        if got != codes_wanted:
            fail(f"deploy/systemd/{unit}: RestartPreventExitStatus {sorted(got)}, want "
                 f"{sorted(codes_wanted)} (usage; for workers also a job gone or failed)")
            good = False
    if good:
        ok(f"systemd units do not restart usage errors ({codes['kExitUsage']}) nor workers "
           f"whose job is gone or failed ({sorted(worker_final - {codes['kExitUsage']})})")


def package_names():
    text = read(os.path.join(ROOT, "scripts", "cmake", "PipeplanPackaging.cmake"))
    return dict(re.findall(r"set\(CPACK_DEBIAN_(\w+)_PACKAGE_NAME ([\w.+-]+)\)", text))


def check_packaging():
    """Debian maintainer scripts and the Dockerfiles built from the packages."""
    names = package_names()
    good = True
    if set(names) != {"CLI", "PLANNER", "WORKER", "DEV", "PYTHON"}:
        fail(f"PipeplanPackaging.cmake: unexpected package set {names}")
        good = False
    for script in ("postinst", "postrm"):
        path = os.path.join(DEPLOY, "debian", script)
        if not os.access(path, os.X_OK):
            fail(f"deploy/debian/{script} is missing or not executable")
            good = False
            continue
        r = subprocess.run(["sh", "-n", path], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"deploy/debian/{script}: sh -n: {r.stderr.strip()}")
            good = False
    postinst = read(os.path.join(DEPLOY, "debian", "postinst"))
    for unit in ("pipeplan-planner.service", "pipeplan-worker@.service"):
        user = re.search(r"^User=(\S+)$", read(os.path.join(DEPLOY, "systemd", unit)), re.M)
        if not user or f"adduser --system" not in postinst or user.group(1) not in postinst:
            fail(f"deploy/debian/postinst must create the user deploy/systemd/{unit} runs as")
            good = False
    k8s_users = {}
    if HAVE_YAML:
        for path, d in k8s_docs():
            if d["kind"] in ("Deployment", "DaemonSet"):
                pod = d["spec"]["template"]["spec"]
                for c in pod["containers"]:
                    k8s_users[c.get("image", "").split(":")[0]] = (
                        c.get("command", [None])[0], pod.get("securityContext", {}).get("runAsUser"))
    for daemon in ("planner", "worker"):
        path = os.path.join(DEPLOY, "docker", f"{daemon}.Dockerfile")
        text = read(path)
        package = names.get(daemon.upper(), "?")
        base = re.search(r"^ARG BASE=(\S+)", text, re.M)
        base = base.group(1) if base else (re.search(r"^FROM (\S+)", text, re.M) or [None, None])[1]
        entry = re.search(r'^ENTRYPOINT \["([^"]+)"', text, re.M)
        user = re.search(r"^USER (\d+)", text, re.M)
        if base != "debian:12" or f"{package}_*.deb" not in text or "apt-get install" not in text:
            fail(f"{rel(path)}: want FROM debian:12 installing {package}_*.deb with apt-get")
            good = False
        if not entry or entry.group(1) != f"/usr/bin/pipeplan-{daemon}":
            fail(f"{rel(path)}: ENTRYPOINT should be /usr/bin/pipeplan-{daemon}, the package's binary")
            good = False
        k8s = k8s_users.get(f"pipeplan-{daemon}")
        if HAVE_YAML and (not k8s or k8s[0] != (entry and entry.group(1))
                          or not user or int(user.group(1)) != k8s[1]):
            fail(f"{rel(path)}: deploy/k8s runs image pipeplan-{daemon} as {k8s}; the image has "
                 f"{entry and entry.group(1)} as USER {user and user.group(1)}")
            good = False
    if good:
        ok("Debian maintainer scripts parse and create the units' user; Dockerfiles install "
           "the packages on debian:12 and match deploy/k8s")


def main():
    print(f"checking {DEPLOY}")
    metrics = code_metrics()
    known = series_names(metrics)
    present_optional = OPTIONAL_METRICS & set(metrics)
    for m in sorted(OPTIONAL_METRICS - present_optional):
        skip(f"{m} is not registered in the code yet: its dashboard queries are not checked")
    if not any(m.startswith("pipeplan_worker_") for m in metrics) or "pipeplan_jobs" not in metrics:
        fail(f"found too few metrics in the code ({sorted(metrics)}); did the sources move?")
    check_json_files()
    check_dashboard(known, present_optional)
    check_rules(known, present_optional)
    check_yaml_files()
    check_k8s()
    check_k8s_replicated()
    check_kustomize()
    check_systemd()
    check_daemon_flags()
    check_exit_codes()
    check_packaging()
    check_prometheus()
    check_docs()
    print(f"\n{passes} passed, {len(skips)} skipped, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
