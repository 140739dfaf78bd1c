"""scripts/bench.sh's report: reads the phase reports of one run (BENCH_WORK),
prints the table, and in a full run writes docs/benchmarks.md and its plot.

Every phase ran BENCH_REPEATS times: a figure is the median of its runs, with
the lowest and highest beside it. CPU-seconds per GB are the brokers' (all
three together, from /proc) and the client's (getrusage), per 10^9 bytes of
records moved. With BENCH_BEFORE=FILE (the BENCH_SUMMARY of an earlier run,
e.g. of the previous release's binaries through BENCH_BIN), every figure gets a
"before" beside it, and the CPU target is judged against it.

The page keeps whatever follows its line ANALYSIS_MARK: the hand-written
analysis (profiles, what limits the figures) survives a rerun.
"""

import datetime
import json
import os
import platform
import re
import statistics
import subprocess

ANALYSIS_MARK = "<!-- everything below is kept when scripts/bench.sh rewrites this page -->"
MB = 1e6  # the floor tool's unit: 10^6 bytes

env = os.environ
work = env["BENCH_WORK"]
mode = env["BENCH_MODE"]
repeats = int(env["BENCH_REPEATS"])
record_size = int(env["BENCH_RECORD_SIZE"])
records = int(env["BENCH_RECORDS"])
reps = range(1, repeats + 1)


def path(name):
    return os.path.join(work, name)


def floor_of(name):
    text = open(path(name)).read()
    return float(re.search(r"baseline_rf3_loopback_MBps ([0-9.]+)", text).group(1))


def cpu_of(name):
    try:
        return float(open(path(name)).read().strip())
    except (OSError, ValueError):
        return None


class Phase:
    """The runs of one phase: their JSON reports and CPU-seconds."""

    def __init__(self, label, gigabytes=None):
        self.label = label
        self.runs = [json.load(open(path(f"{label}-{r}.json"))) for r in reps]
        self.broker_cpu = [cpu_of(f"{label}-{r}.broker-cpu") for r in reps]
        self.client_cpu = [cpu_of(f"{label}-{r}.client-cpu") for r in reps]
        self.gigabytes = gigabytes

    def mbs(self):
        return [r["bytes_per_sec"] / MB for r in self.runs]

    def rps(self):
        return statistics.median(r["records_per_sec"] for r in self.runs)

    def cpu_per_gb(self, which):
        values = [c for c in (self.broker_cpu if which == "broker" else self.client_cpu) if c is not None]
        if not values or not self.gigabytes:
            return None
        return statistics.median(values) / self.gigabytes

    def latency(self, key):
        return [r["latency_ms"][key] for r in self.runs]


floors = [floor_of(f"floor-{r}.txt") for r in reps]
floor = statistics.median(floors)
floor_end = floor_of("floor-end.txt")
gb = records * record_size / 1e9
phases = {label: Phase(label, gb) for label in "blcdhijke"}
phases["f"] = Phase("f", (records // 2) * record_size / 1e9)
phases["g"] = Phase("g")
rss = [int(open(path(f"rss-{i}.kib")).read().strip() or 0) / 1024 for i in (1, 2, 3)]

before = None
if env.get("BENCH_BEFORE"):
    before = json.load(open(env["BENCH_BEFORE"]))

summary = {"floor": floor, "figures": {}}


def spread(values, unit=""):
    if len(values) == 1:
        return ""
    return f" ({min(values):.1f}–{max(values):.1f}{unit})"


def cpu_text(p):
    bc, cc = p.cpu_per_gb("broker"), p.cpu_per_gb("client")
    if bc is None:
        return ""
    return f"{bc:.2f} / {cc:.2f}"


rows = []  # (figure, value, /floor, CPU-s per GB, before, target, met?)


def before_text(label):
    if not before or label not in before["figures"]:
        return ""
    fig = before["figures"][label]
    text = f"{fig['mbs']:.1f} MB/s ({fig['mbs'] / before['floor']:.2f})"
    if fig.get("broker_cpu_gb") is not None:
        text += f"; {fig['broker_cpu_gb']:.2f} / {fig['client_cpu_gb']:.2f}"
    return text


def throughput(label, title, target=("", None)):
    p = phases[label]
    m = statistics.median(p.mbs())
    summary["figures"][label] = {
        "mbs": m,
        "runs_mbs": p.mbs(),
        "broker_cpu_gb": p.cpu_per_gb("broker"),
        "client_cpu_gb": p.cpu_per_gb("client"),
    }
    rows.append((title, f"{m:.1f} MB/s{spread(p.mbs())}", f"{m / floor:.2f}", cpu_text(p),
                 before_text(label), target[0], target[1]))
    return m


# The floor's CPU is one process doing a client's and three brokers' work: it
# compares with (b)'s brokers + client together.
floor_cpus = [c for c in (cpu_of(f"floor-{r}.txt.cpu") for r in reps) if c is not None]
floor_cpu_gb = statistics.median(floor_cpus) / gb if floor_cpus else None
b_cpu_total = None
if phases["b"].cpu_per_gb("broker") is not None and phases["b"].cpu_per_gb("client") is not None:
    b_cpu_total = phases["b"].cpu_per_gb("broker") + phases["b"].cpu_per_gb("client")
floor_cpu_text = ""
if floor_cpu_gb is not None:
    floor_cpu_text = f"{floor_cpu_gb:.2f} (all hops)"
    if b_cpu_total is not None:
        floor_cpu_text += f"; (b) all: {b_cpu_total:.2f} = {b_cpu_total / floor_cpu_gb:.2f} ×"
summary["floor_cpu_gb"] = floor_cpu_gb
rows.append(("(a) floor, RF 3 raw TCP + files", f"{floor:.1f} MB/s{spread(floors)}", "1.00", floor_cpu_text,
             f"{before['floor']:.1f} MB/s" + (f"; {before['floor_cpu_gb']:.2f}" if before.get("floor_cpu_gb") else "")
             if before else "", "", None))
b_mbs = statistics.median(phases["b"].mbs())
throughput("b", "(b) RF 3 acks=all, 1 KiB", ("≥ 0.5 × floor (stretch 0.7)", b_mbs >= 0.5 * floor))
if before and "b" in before["figures"]:
    old = before["figures"]["b"]
    p = phases["b"]
    bc, cc = p.cpu_per_gb("broker"), p.cpu_per_gb("client")
    if bc is not None and old.get("broker_cpu_gb"):
        cut_b = 1 - bc / old["broker_cpu_gb"]
        cut_c = 1 - cc / old["client_cpu_gb"]
        rows.append(("(b) CPU-seconds per GB, brokers / client", f"{bc:.2f} / {cc:.2f}", "", "",
                     f"{old['broker_cpu_gb']:.2f} / {old['client_cpu_gb']:.2f}",
                     f"≥ 40 % less than before each (now {100 * cut_b:.0f} % / {100 * cut_c:.0f} %)",
                     cut_b >= 0.4 and cut_c >= 0.4))
l_mbs = statistics.median(phases["l"].mbs())
throughput("l", "(l) RF 3 acks=all, TLS (SASL_SSL listener)", (f"(l)/(b) = {l_mbs / b_mbs:.2f}", None))
k_mbs = statistics.median(phases["k"].mbs())
throughput("k", "(k) RF 3 acks=all, librdkafka via the Kafka listener", (f"(k)/(b) = {k_mbs / b_mbs:.2f}", None))
throughput("c", "(c) RF 3 acks=1")
throughput("d", "(d) RF 1")
throughput("h", "(h) RF 3 acks=all, lz4")
throughput("i", "(i) RF 3 acks=all, zstd")
j_mbs = statistics.median(phases["j"].mbs())
throughput("j", "(j) RF 3 acks=all, not idempotent", ("(b) ≥ 0.95 × (j)", b_mbs >= 0.95 * j_mbs))
e_rps, b_rps = phases["e"].rps(), phases["b"].rps()
throughput("e", "(e) consumer, from a dropped page cache" if env.get("BENCH_DROP_CACHES") == "1" else "(e) consumer",
           (f"≥ 3 × (b) (now {e_rps / b_rps:.1f} ×)", e_rps >= 3 * b_rps))

f = phases["f"]
f_p99, f_p999 = f.latency("p99"), f.latency("p99_9")
f_met = sum(1 for a, b in zip(f_p99, f_p999) if a <= 10 and b <= 25)
f_rate = statistics.median(r["records_per_sec"] for r in f.runs)
f_asked = f.runs[0]["target_throughput"]
f_note = f" (asked {f_asked:,.0f}: not sustained)" if f_rate < 0.97 * f_asked else ""
runs_text = "; ".join(f"{a:.1f} / {b:.1f}" for a, b in zip(f_p99, f_p999))
summary["figures"]["f"] = {"p99": f_p99, "p99_9": f_p999, "rate": f_rate}
f_before = ""
if before and "f" in before["figures"]:
    old = before["figures"]["f"]
    f_before = "p99 / p99.9: " + "; ".join(f"{a:.1f} / {b:.1f}" for a, b in zip(old["p99"], old["p99_9"]))
rows.append((f"(f) produce latency at 0.25 × floor, p99 / p99.9 (ms) per run",
             f"{runs_text} at {f_rate:,.0f} rec/s{f_note}", "", cpu_text(f), f_before,
             f"p99 ≤ 10, p99.9 ≤ 25 ms in every run (met in {f_met} of {repeats})", f_met == repeats))
g = phases["g"]
g_p50, g_p99, g_p999 = (statistics.median(g.latency(k)) for k in ("p50", "p99", "p99_9"))
summary["figures"]["g"] = {"p50": g_p50, "p99": g_p99, "p99_9": g_p999}
g_before = ""
if before and "g" in before["figures"]:
    old = before["figures"]["g"]
    g_before = f"p50 {old['p50']:.2f} / p99 {old['p99']:.2f} / p99.9 {old['p99_9']:.2f} ms"
rows.append(("(g) end-to-end latency, acks=all (median of runs)",
             f"p50 {g_p50:.2f} / p99 {g_p99:.2f} / p99.9 {g_p999:.2f} ms", "", "", g_before,
             "p99 ≤ 15 ms", g_p99 <= 15))
summary["figures"]["rss"] = rss
rows.append(("broker peak RSS (VmHWM)", " / ".join(f"{m:.0f}" for m in rss) + " MiB", "", "",
             " / ".join(f"{m:.0f}" for m in before["figures"]["rss"]) + " MiB" if before else "",
             "< 200 MiB each", max(rss) < 200))


def mark(ok):
    return "" if ok is None else ("met" if ok else "MISSED")


header = ("figure", "value: median (lowest–highest)", "/floor", "CPU-s per GB, brokers / client",
          "before" if before else "", "target", "")
widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(6)]
print()
for r in [header] + rows:
    cells = [str(r[i]).ljust(widths[i]) for i in range(6)]
    print("  ".join(cells) + "  " + (mark(r[6]) if r is not header else ""))
floor_runs = ", ".join(f"{x:.1f}" for x in floors)
print(f"\nfloor: median {floor:.1f} MB/s of {repeats} run(s) ({floor_runs}) [{env['BENCH_FLOOR_SOURCE']}]")
drift = f"the floor measured again at the end: {floor_end:.1f} MB/s ({floor_end / floor:.2f} × the median)"
print(drift)
pressure = env["BENCH_CPU_PRESSURE"]
print(f"CPU pressure during the run: some task waited for a CPU {pressure}% of the time"
      " (the benchmark's own 4 processes on the cores count too; far above ~30% means other work competed)")
if env.get("BENCH_DROP_CACHES") != "1":
    print("note: the page cache was synced, not dropped, before each phase (not root)")

try:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    # The report and plot this run writes are not changes to what was measured.
    # Pages (this one among them) are not changes to what was measured.
    if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs"],
                      capture_output=True, text=True).stdout.strip():
        rev += " with uncommitted changes"
except OSError:
    rev = "?"
if env.get("BENCH_BIN"):
    # Prebuilt binaries: the checkout says nothing about what they were built from.
    rev = env.get("BENCH_BIN_REV") or f"binaries in {env['BENCH_BIN_USED']}"
summary["rev"] = rev
summary["bin"] = env.get("BENCH_BIN_USED", "")
if env.get("BENCH_SUMMARY"):
    with open(env["BENCH_SUMMARY"], "w") as out:
        json.dump(summary, out, indent=1)
    print(f"wrote the summary to {env['BENCH_SUMMARY']}")

if mode != "full":
    print("(smoke run: small record counts, figures are not meaningful and not asserted)")
    raise SystemExit(0)
if not env.get("BENCH_DOC"):
    raise SystemExit(0)

# --- the plot: throughput bars (MB/s, floor first) and latency CDFs ---
import matplotlib  # noqa: E402  (only a full run needs it)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
labels = ["floor\n(raw RF 3)", "RF 3\nacks=all", "RF 3 acks=all\nTLS", "librdkafka\nRF 3 acks=all",
          "RF 3\nacks=1", "RF 1", "consumer"]
values = [floor] + [statistics.median(phases[x].mbs()) for x in "blkcde"]
colors = ["#999999", "#1f77b4", "#9467bd", "#ff7f0e", "#4a9ad4", "#8cbfe6", "#2ca02c"]
bars = ax1.bar(labels, values, color=colors)
for bar, v in zip(bars, values):
    ax1.annotate(f"{v:.0f}\n({v / floor:.2f}×)", (bar.get_x() + bar.get_width() / 2, v),
                 ha="center", va="bottom", fontsize=8)
ax1.axhline(0.5 * floor, color="#d62728", ls="--", lw=1, label="target: 0.5 × floor")
ax1.set_ylabel("MB/s (10^6 bytes), median of runs")
ax1.set_title("Throughput, 1 KiB records, 3 brokers on loopback")
ax1.set_ylim(0, max(values) * 1.25)
ax1.legend(loc="upper right", fontsize=8)
for name, runs in [("produce at 0.25 × floor, acks=all", f.runs), ("end-to-end, acks=all", g.runs)]:
    for n, r in enumerate(runs):
        pts = r["latency_cdf"]
        ax2.plot([p[0] for p in pts], [p[1] for p in pts], label=name if n == 0 else None,
                 drawstyle="steps-post", color="#1f77b4" if "produce" in name else "#2ca02c", alpha=0.8)
ax2.set_xscale("log")
ax2.set_xlabel("latency (ms, log scale)")
ax2.set_ylabel("fraction of records at or below")
ax2.set_title("Latency CDF (one line per run)")
for q, ls in [(0.99, ":"), (0.999, "--")]:
    ax2.axhline(q, color="#777777", ls=ls, lw=0.8)
ax2.legend(loc="lower right", fontsize=8)
ax2.grid(True, which="both", alpha=0.3)
fig.tight_layout()
fig.savefig(env["BENCH_PNG"], dpi=110)


# --- the page ---
def cpu():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


k_config = " ".join(f"{key}={val}" for key, val in phases["k"].runs[0]["config"].items())
table = ["| figure | value: median (lowest–highest) | /floor | CPU-s per GB, brokers / client | "
         + ("before: median (/floor); CPU-s per GB | " if before else "") + "target | |",
         "|---|---|---|---|" + ("---|" if before else "") + "---|---|"]
for r in rows:
    table.append(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | " + (f"{r[4]} | " if before else "")
                 + f"{r[5]} | {mark(r[6])} |")
before_line = ""
if before:
    before_line = (f"\"Before\" is the same script, run just before on the same machine with "
                   f"the binaries of `{before['rev']}` (through `BENCH_BIN`).\n")
cache_line = ("Every phase, the floor's runs included, starts after `sync` and a dropped page cache "
              "(`echo 1 > /proc/sys/vm/drop_caches`)"
              if env.get("BENCH_DROP_CACHES") == "1"
              else "Every phase starts after `sync` (the page cache could not be dropped: not root)")
kept = ""
if os.path.exists(env["BENCH_DOC"]):
    old_page = open(env["BENCH_DOC"]).read()
    if ANALYSIS_MARK in old_page:
        kept = old_page.split(ANALYSIS_MARK, 1)[1]
page = f"""# Benchmarks

Generated by `scripts/bench.sh` on {datetime.date.today().isoformat()} (commit `{rev}`):
three brokers and the client on one machine ({os.cpu_count()} cores, {cpu()}),
over loopback, release build, data in a throwaway directory, no fsync (the
default). The 1-minute load average was {env['BENCH_LOAD']} when the run started,
and some runnable task waited for a CPU during {pressure}% of the
run (Linux pressure stall information; the benchmark's own processes count too).
Every phase ran {repeats} times: a figure is the median of its runs, with the
lowest and highest in brackets. {cache_line}. Ratios are to the floor's median
(its runs: {floor_runs} MB/s; {drift}: the further from 1.00, the more the
machine itself changed during the run). CPU-seconds per GB are per 10^9 bytes
of records: the three brokers together (from `/proc/PID/stat`) and the client
process (getrusage), each the median of the runs; the floor's is its one
process doing every hop (producer, leader, two followers), to compare with
(b)'s brokers and client together.
{before_line}
![throughput and latency](img/benchmarks.png)

{chr(10).join(table)}

MB is 10^6 bytes here (the floor tool's unit); `syncline perf` prints Kafka's MB
(2^20 bytes) in its own lines.

## What was run

- **(a) floor**: {env['BENCH_FLOOR_SOURCE']} — raw bytes producer → leader → 2
  followers over loopback TCP, each hop appending to a file; no protocol at all,
  so a broker can only approach it. It moves as many bytes as (b).
- **(b)–(d)**: `syncline perf produce --num-records {records} --record-size
  {record_size} --throughput -1 --producer-props acks=… {env['BENCH_PRODUCER_PROPS_USED'].strip()}`
  to a fresh topic per run of {env['BENCH_PARTITIONS']} partitions (RF 3 with
  `min.insync.replicas=2`, or RF 1), deleted after the run.
- **(h), (i)**: (b) with `compression.type=lz4` and `=zstd`. The perf tool
  sends one random payload (letters A–Z) for every record, as Kafka's does, so
  a batch compresses far better than real data would: these show what
  compression costs in CPU and what it saves in bytes on the way (the MB/s
  counted are the uncompressed record bytes), not real-world ratios.
- **(j)**: (b) with `enable.idempotence=false`. (b) runs as an idempotent
  producer, the default (producer ids, sequence numbers, up to 5 batches of a
  partition in flight): the target is that idempotence costs at most 5 %, i.e.
  (b) ≥ 0.95 × (j).
- **(k)**: (b)'s load through the brokers' Kafka wire-protocol listeners
  (`kafka_listeners`), with librdkafka as the producer: {phases['k'].runs[0]['client']},
  driven by `scripts/bench/kafka_producer.py` ({records:,} records of
  {record_size} B, no key, one random payload as the perf tool sends, to a
  topic like (b)'s) with `{k_config}`.
  Counted from the first `produce()` to the last delivery report, after one
  uncounted record per partition; its client CPU includes the Python loop
  that feeds librdkafka.
- **(l)**: (b) over TLS: the same `syncline perf produce`, through a second
  client listener of each broker that is `SASL_SSL` (TLS 1.3 with rustls and a
  local CA's certificates, then a SCRAM-SHA-512 login once per connection).
  The brokers replicate over their plaintext listener in both, so (l)/(b) is
  what TLS costs a producer's path.
- **(e)**: `syncline perf consume` of the records the last run of (b) wrote,
  from the log start{', with the page cache dropped first: the records come from the disk' if env.get('BENCH_DROP_CACHES') == '1' else ''}.
- **(f)**: `syncline perf produce` with acks=all at a fixed rate, a quarter of
  the floor's median (half of (b)'s target), half as many records as (b);
  latency is from `send` to the acknowledgement. The target holds only if
  every run meets it.
- **(g)**: `syncline perf e2e --producer-acks all`: {env['BENCH_E2E_RECORDS']} records of 1 KiB, one at a
  time, to a one-partition RF 3 topic, timed from `send` until a consumer has it.
- **RSS**: each broker's `VmHWM` (peak resident set) from `/proc` at the end.

{ANALYSIS_MARK}{kept}"""
open(env["BENCH_DOC"], "w").write(page)
print(f"\nwrote {env['BENCH_DOC']} and {env['BENCH_PNG']}")
