"""How fast does the race look in a real browser, against the decoders' own speed?

Launches the app as `make run` does (`python app.py`, its own process), drives
Debian's Chromium through Playwright over several prompts and settings (greedy
and sampled), then runs the same decoders standalone (one process, like
`python -m specviz bench`), and prints in one run, per method:

- tokens/s the app's columns show, tokens/s standalone, and their ratio;
- Sequoia's and Lookahead's speedup over autoregressive, shown vs standalone;
- each race's wall time (from "Racing" to "Done", timestamped by the page) against the sum
  of the three methods' compute;
- the Chromium renderer's CPU share during the races and its resident memory
  after the first and after the last race.

    .venv/bin/python scripts/app_speed.py --races 10 --max-new-tokens 96

With `--threads 1,2` it serves one app per worker thread count (SPECVIZ_THREADS) side by side, runs
every race on each in turn (a shared machine's drift falls on both), reports each, and caches the
count whose races the page showed fastest (geometric mean of the three methods' tokens/s) as this
machine's choice: `runtime.worker.thread_policy` then runs the app's worker at it.

Run it on an otherwise idle machine: anything else on the cores is what it
measures. Output: a table on stdout and JSON with --json PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
METHODS = ("ar", "sequoia", "lookahead")
# (example button, temperature): the app's own examples, greedy and sampled.
SETTINGS = [("code", 0.0), ("chat", 0.0), ("story", 0.6), ("math", 0.0), ("repeats itself", 0.6)]
CLK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_app(port: int, log, threads: int | None = None) -> subprocess.Popen:
    env = dict(os.environ, GRADIO_SERVER_PORT=str(port), GRADIO_ANALYTICS_ENABLED="False")
    if threads:
        env["SPECVIZ_THREADS"] = str(threads)
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    import urllib.request

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the app exited with code {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
            return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the app did not come up in 180 s")


def chromium_pids(kind: bytes | None = b"--type=renderer") -> list[int]:
    """Chromium's processes of one --type (None: all of them: browser, GPU/compositor, utilities)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()   # Chromium rewrites its argv into one string
            except OSError:
                continue
            if b"chromium" in cmd[:64] and (kind is None or kind in cmd):
                pids.append(int(d.name))
    return pids


def renderer_pids() -> list[int]:
    return chromium_pids()


def preemptions(pids: list[int]) -> int:
    """Involuntary context switches of these processes' threads: how often the scheduler took the CPU
    from them while they wanted it (the worker's count says how much the page and server cut into it)."""
    total = 0
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                m = re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", (task / "status").read_text())
                total += int(m.group(1)) if m else 0
            except OSError:
                pass
    return total


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK
        except (OSError, IndexError):
            pass
    return total


def rss_mb(pids: list[int]) -> float:
    """Resident memory of the page's renderer: the largest of Chromium's renderers."""
    sizes = [0]
    for pid in pids:
        try:
            m = re.search(r"VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text())
            sizes.append(int(m.group(1)) if m else 0)
        except OSError:
            pass
    return max(sizes) / 1024


def rss_after_gc(page) -> float:
    """The renderer's resident memory once V8 has collected its garbage (DevTools protocol), which
    Chromium would do on its own sooner or later: what the page really keeps, run over run."""
    cdp = page.context.new_cdp_session(page)
    try:
        cdp.send("HeapProfiler.collectGarbage")
    finally:
        cdp.detach()
    time.sleep(0.5)
    return rss_mb(renderer_pids())


def shown_stats(page) -> dict:
    """The numbers each column header shows (tokens/s, tokens, time)."""
    out = {}
    for m in METHODS:
        lines = [x.strip() for x in page.locator(f"#sv-stats-{m} .sv-stats").inner_text(timeout=5000).split("\n")]
        lines = [x for x in lines if x]
        values = {key: lines[i - 1] for i, key in enumerate(lines) if i and key in ("tokens/s", "tokens", "time")}
        try:
            out[m] = {"tokens_per_second": float(values["tokens/s"]), "tokens": int(values["tokens"]),
                      "seconds": float(values["time"].split()[0])}
        except (KeyError, ValueError):
            out[m] = None
    return out


def app_pids(app: subprocess.Popen) -> dict[str, list[int]]:
    """The app's server process and its decoding worker (a child running specviz.runtime.worker)."""
    worker = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = Path(d, "stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[1]) == app.pid and b"specviz.runtime.worker" in (d / "cmdline").read_bytes():
                    worker.append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue
    return {"server": [app.pid], "worker": worker}


WATCH_JS = """() => {
  const s = window.__sv = {racing: null, done: null};
  const status = () => (document.querySelector('#sv-status') || {}).innerText || '';
  const obs = new MutationObserver(() => {
    const text = status();
    if (s.racing === null && /Racing/.test(text)) s.racing = performance.now();
    if (s.racing !== null && /Done|Stopped/.test(text)) { s.done = performance.now(); obs.disconnect(); }
  });
  obs.observe(document.body, {subtree: true, childList: true, characterData: true});
}"""


def race_in_browser(page, app, example: str, temperature: float, max_new: int, seed: int) -> dict:
    page.get_by_role("button", name=example, exact=True).click()
    page.locator("#sv-max-new input[type=number]").fill(str(max_new))
    page.locator("#sv-max-new input[type=number]").press("Enter")
    page.locator("#sv-temperature input[type=number]").fill(str(temperature))
    page.locator("#sv-temperature input[type=number]").press("Enter")
    pids, all_chromium = renderer_pids(), chromium_pids(None)
    procs = app_pids(app)
    cpu0, t0 = cpu_seconds(pids), time.monotonic()
    chromium0, preempt0 = cpu_seconds(all_chromium), preemptions(procs["worker"])
    proc0 = {k: cpu_seconds(v) for k, v in procs.items()}
    # The page timestamps the race itself (a MutationObserver: no polling load on the renderer we
    # measure): when the status says "Racing" (decoders built, first step next) and when it says "Done".
    page.evaluate(WATCH_JS)
    page.locator("#sv-run").click()
    page.wait_for_function("window.__sv && window.__sv.done !== null", timeout=600_000, polling=500)
    marks = page.evaluate("window.__sv")
    done = time.monotonic()
    cpu1, chromium1 = cpu_seconds(pids), cpu_seconds(all_chromium)
    procs = app_pids(app)   # the worker starts with the first race
    preempt = preemptions(procs["worker"]) - (preempt0 if procs["worker"] else 0)
    proc_share = {k: (cpu_seconds(v) - proc0.get(k, 0.0)) / max(done - t0, 1e-9) for k, v in procs.items()}
    shown = shown_stats(page)
    status = page.locator("#sv-status").inner_text()
    return {"example": example, "temperature": temperature, "shown": shown,
            "wall_s": (marks["done"] - marks["racing"]) / 1000,
            "click_to_done_s": done - t0, "compute_s": sum(v["seconds"] for v in shown.values() if v),
            "renderer_cpu_share": (cpu1 - cpu0) / max(done - t0, 1e-9), "renderer_rss_mb": rss_mb(renderer_pids()),
            "renderer_rss_mb_after_gc": rss_after_gc(page),
            "contention_warning": "slower than this machine runs them" in status,
            "server_cpu_share": proc_share["server"], "worker_cpu_share": proc_share["worker"],
            "chromium_cpu_share": (chromium1 - chromium0) / max(done - t0, 1e-9),
            "worker_preemptions_per_s": preempt / max(done - t0, 1e-9)}


class Standalone:
    """The same decoders, prompts and options run alone in this process (as `bench` runs them), with
    the worker's thread count. Each app race is followed by its standalone twin, so both see the same
    machine (a shared machine's speed drifts by 20% over minutes)."""

    def __init__(self):
        self.pair = None

    def run(self, example: str, temperature: float, max_new: int, threads: int | None = None) -> dict:
        import torch

        from specviz.engine.methods import make_decoder
        from specviz.engine.models import load_pair
        from specviz.runtime.worker import thread_policy

        torch.set_num_threads(threads or thread_policy().threads)
        if self.pair is None:
            # Loaded here, at the worker's thread count and after the app measured this machine: `auto` then
            # reads the precision the app chose (loaded at start, at this process's own count, it found none
            # measured and took the rule's bf16 while the page raced q4).
            self.pair = load_pair("default", None, dtype="auto")
        from specviz.engine.sampling import SamplingConfig
        from specviz.ui.layout import EXAMPLES

        sampling = SamplingConfig(temperature=temperature, top_p=1.0, seed=0)
        row = {}
        for m in METHODS:
            trace = make_decoder(m, self.pair, EXAMPLES[example], sampling=sampling, max_new_tokens=max_new).run()
            row[m] = {"tokens_per_second": trace.tokens_per_second, "tokens": len(trace.token_ids),
                      "seconds": trace.wall_seconds}
        return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--races", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", default="", help="worker thread counts to compare, e.g. 1,2 (caches the fastest)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from specviz.engine.machine import cpu_words, usable_cores
    from specviz.runtime.worker import save_measured_threads, thread_policy

    counts = [int(t) for t in args.threads.split(",") if t.strip()] or [None]
    (ROOT / "test-artifacts").mkdir(exist_ok=True)   # a fresh clone has none yet
    apps = {}
    plan = [SETTINGS[i % len(SETTINGS)] for i in range(args.races)]
    races = {t: [] for t in counts}
    alone = {t: [] for t in counts}
    loaded_rss = 0.0
    solo = Standalone()
    print(f"CPU: {cpu_words(thread_policy().threads)}", flush=True)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            pages = {}
            for i, threads in enumerate(counts):
                # One app at a time, each left to measure this machine before the next starts (two
                # measurements at once would each see the other as contention, and cache nothing).
                port = (args.port + i if args.port else free_port())
                name = f"app_speed_server{'' if threads is None else f'_{threads}t'}.log"
                apps[threads] = (port, launch_app(port, open(ROOT / "test-artifacts" / name, "w"), threads))
                pages[threads] = page = browser.new_page(viewport={"width": 1600, "height": 1000})
                page.goto(f"http://127.0.0.1:{port}/", wait_until="load", timeout=120_000)
                page.wait_for_selector("#sv-run", timeout=120_000)
                waited = wait_measured(page)
                print(f"app{'' if threads is None else f' at {threads} thread(s)'}: measured this machine in "
                      f"{waited:.0f} s", flush=True)
            loaded_rss = rss_mb(renderer_pids())
            print(f"page loaded: renderer {loaded_rss:.0f} MB", flush=True)
            for i, (example, temperature) in enumerate(plan):
                for threads in counts:
                    r = race_in_browser(pages[threads], apps[threads][1], example, temperature, args.max_new_tokens,
                                        seed=0)
                    races[threads].append(r)
                    alone[threads].append(solo.run(example, temperature, args.max_new_tokens, threads))
                    print_race(i, example, temperature, r, alone[threads][-1], threads)
            browser.close()
    finally:
        for _, app in apps.values():
            app.terminate()
            try:
                app.wait(20)
            except subprocess.TimeoutExpired:
                app.kill()
    reports = {}
    for threads in counts:
        reports[threads] = report = summarise(races[threads], alone[threads])
        report["renderer_rss_mb_loaded"] = loaded_rss
        if threads is not None:
            print(f"\n## worker at {threads} thread{'s' * (threads != 1)}")
        print_report(report)
    out = {"cpu": cpu_words(), "by_threads": {str(t): {"races": races[t], "standalone": alone[t],
                                                        "summary": reports[t]} for t in counts}}
    if len(counts) > 1:
        shown = {t: statistics.geometric_mean(v["app_tps"] for v in reports[t]["methods"].values()) for t in counts}
        cores = usable_cores()
        path = save_measured_threads(cores, shown, {"races": args.races, "max_new_tokens": args.max_new_tokens,
                                                    "app_over_standalone": {str(t): {m: round(v["ratio"], 3) for m, v in
                                                                            reports[t]["methods"].items()} for t in counts}})
        best = max(shown, key=lambda t: (shown[t], -t))
        print(f"\nthe page's tokens/s (geometric mean of the methods): "
              + ", ".join(f"{t} thread{'s' * (t != 1)} {v:.1f}" for t, v in shown.items())
              + f"; the app's worker will run {best} thread{'s' * (best != 1)} on this machine (cached in {path})")
        out["chosen_threads"] = best
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


def wait_measured(page, timeout: float = 900.0, quiet_s: float = 5.0) -> float:
    """Seconds until the app's worker has measured this machine for 'auto' sizes: the page's measuring bar
    (#sv-measuring) gone for `quiet_s` (it shows within a second of loading while there is work)."""
    start = time.monotonic()
    quiet_since = start
    while time.monotonic() - start < timeout:
        if page.locator("#sv-measuring progress").count():
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            return quiet_since - start
        time.sleep(0.5)
    raise SystemExit(f"the app was still measuring this machine after {timeout:.0f} s")


def print_race(i: int, example: str, temperature: float, r: dict, alone: dict, threads: int | None) -> None:
    print(f"race {i + 1}{'' if threads is None else f' ({threads}t)'}: {example} T={temperature}: "
          + ", ".join(f"{m} {v['tokens_per_second']:.1f} tok/s" for m, v in r["shown"].items() if v)
          + f"; wall {r['wall_s']:.1f} s vs compute {r['compute_s']:.1f} s; renderer "
            f"{100 * r['renderer_cpu_share']:.0f}% CPU, {r['renderer_rss_mb']:.0f} MB "
            f"({r['renderer_rss_mb_after_gc']:.0f} after GC); server "
            f"{100 * r['server_cpu_share']:.0f}%, worker {100 * r['worker_cpu_share']:.0f}% "
            f"({r['worker_preemptions_per_s']:.0f} preemptions/s), all Chromium "
            f"{100 * r['chromium_cpu_share']:.0f}%"
          + (" [contention warned]" if r["contention_warning"] else "")
          + "; standalone " + ", ".join(f"{m} {v['tokens_per_second']:.1f}" for m, v in alone.items()),
          flush=True)


def summarise(races: list[dict], alone: list[dict]) -> dict:
    n = len(races)
    out = {"methods": {}}
    for m in METHODS:
        app = [r["shown"][m]["tokens_per_second"] for r in races[:n] if r["shown"].get(m)]
        solo = [a[m]["tokens_per_second"] for a in alone]
        out["methods"][m] = {"app_tps": statistics.mean(app), "standalone_tps": statistics.mean(solo),
                             "ratio": statistics.mean(app) / statistics.mean(solo)}
    for m in ("sequoia", "lookahead"):
        shown = statistics.mean(r["shown"][m]["tokens_per_second"] / r["shown"]["ar"]["tokens_per_second"]
                                for r in races[:n])
        solo = statistics.mean(a[m]["tokens_per_second"] / a["ar"]["tokens_per_second"] for a in alone)
        out["methods"][m].update(speedup_app=shown, speedup_standalone=solo, speedup_error=shown / solo - 1)
    out["wall_over_compute"] = statistics.mean(r["wall_s"] / r["compute_s"] for r in races)
    for key in ("renderer_cpu_share", "chromium_cpu_share", "server_cpu_share", "worker_cpu_share",
                "worker_preemptions_per_s"):
        out[key] = statistics.mean(r[key] for r in races)
    out["renderer_rss_mb_first"] = races[0]["renderer_rss_mb"]
    out["renderer_rss_mb_last"] = races[-1]["renderer_rss_mb"]
    out["renderer_rss_mb_after_gc"] = [round(r["renderer_rss_mb_after_gc"]) for r in races]
    out["contention_warnings"] = sum(r["contention_warning"] for r in races)
    return out


def print_report(rep: dict) -> None:
    print("\n| method | app tok/s | standalone tok/s | app / standalone | speedup shown | speedup standalone |")
    print("|---|---|---|---|---|---|")
    for m, v in rep["methods"].items():
        sp = (f"{v['speedup_app']:.2f}x | {v['speedup_standalone']:.2f}x" if "speedup_app" in v else "— | —")
        print(f"| {m} | {v['app_tps']:.1f} | {v['standalone_tps']:.1f} | {v['ratio']:.2f} | {sp} |")
    print(f"\nrace wall / sum of compute: {rep['wall_over_compute']:.2f}")
    print(f"renderer CPU share during races: {100 * rep['renderer_cpu_share']:.0f}% of one core "
          f"(all Chromium {100 * rep['chromium_cpu_share']:.0f}%, server {100 * rep['server_cpu_share']:.0f}%, "
          f"worker {100 * rep['worker_cpu_share']:.0f}% with {rep['worker_preemptions_per_s']:.0f} preemptions/s)")
    print(f"renderer RSS: {rep['renderer_rss_mb_loaded']:.0f} MB with the page loaded, "
          f"{rep['renderer_rss_mb_first']:.0f} MB after race 1, "
          f"{rep['renderer_rss_mb_last']:.0f} MB after the last; after a garbage collection, race by race: "
          f"{rep['renderer_rss_mb_after_gc']} MB")
    print(f"contention warnings shown: {rep['contention_warnings']}")


if __name__ == "__main__":
    sys.exit(main())
