"""Speculative decoding, measured: llama-server with Qwen2.5-Coder-1.5B alone, with the 0.5B
drafting for it, and with the prompt's own n-grams drafting (no second model), on grounded
prompts shaped like Quarry's: its system prompt (seeds/orchestrator.json), six numbered evidence
sentences chosen by word overlap from the question's Rust Book page, and its instruction.
One generation thread and two for prompts, as Quarry runs the model; greedy; no prompt cache.
Prints first token, turn, generated tokens/s and drafted/accepted tokens per variant.

Usage: speculative.py LLAMA_SERVER BIG.gguf SMALL.gguf OUT_DIR   (N=questions, default 24)
"""
import html
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request

SERVER, BIG, SMALL, OUT = sys.argv[1:5]
N = int(os.environ.get("N", "24"))
THREADS = "2"
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
STOP = {"the", "a", "an", "of", "to", "is", "in", "what", "which", "does", "do", "how", "and", "for",
        "with", "that", "it", "by", "on", "when", "you"}

sysroot = subprocess.check_output(["rustc", "--print", "sysroot"], text=True).strip()
book = f"{sysroot}/share/doc/rust/html/book"
system = json.load(open(f"{ROOT}/seeds/orchestrator.json"))["system_prompt"]


def words(s):
    return set(re.findall(r"[a-z0-9_]+", s.lower())) - STOP


def page_sentences(path):
    raw = open(path, encoding="utf-8", errors="replace").read()
    main = raw[raw.find("<main>"):raw.find("</main>")] if "<main>" in raw else raw
    text = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", main)))
    return [s.strip() for s in re.split(r"(?<=[.!?:])\s+", text) if 20 < len(s.strip()) < 400]


prompts = []
for line in open(f"{ROOT}/tests/data/grounded-qa/questions.jsonl"):
    q = json.loads(line)
    if q.get("source") != "rust-book":
        continue
    asked = words(q["question"])
    best = sorted(page_sentences(f"{book}/{q['file']}"), key=lambda s: -len(asked & words(s)))[:6]
    evidence = "".join(f"[{i + 1}] {s}\n" for i, s in enumerate(best))
    prompts.append((q["id"], (
        f"Evidence:\n{evidence}\nQuestion: {q['question']}\nAnswer the question in one or two full "
        "sentences using only the evidence, with its exact names, numbers and code. End each "
        "sentence with the number of the evidence it comes from, like [1].")))
    if len(prompts) == N:
        break


def ask(port, user):
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": 96, "temperature": 0, "cache_prompt": False, "stream": True}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    start, first, text, timings = time.time(), None, "", {}
    with urllib.request.urlopen(request, timeout=300) as response:
        for raw in response:
            raw = raw.decode().strip()
            if not raw.startswith("data: ") or raw == "data: [DONE]":
                continue
            event = json.loads(raw[6:])
            delta = (event.get("choices") or [{}])[0].get("delta", {}).get("content")
            if delta and first is None:
                first = time.time() - start
            text += delta or ""
            timings = event.get("timings", timings)
    return dict(first=first, total=time.time() - start, text=text, **timings)


peak_rss = {}


def server_peak_rss_mib(pid):
    """The server's peak resident memory (VmHWM), in MiB."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return None


def run(label, extra):
    port = "18931"
    args = [SERVER, "-m", BIG, "--port", port, "--host", "127.0.0.1", "-t", "1", "-tb", THREADS,
            "-c", "4096", "--no-webui", "-np", "1"] + extra
    with open(f"{OUT}/server-{label}.log", "w") as log:
        server = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(240):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
                    break
                except Exception:
                    time.sleep(0.5)
            # The first question warms the server up and is not counted.
            rows = [dict(id=qid, **ask(port, user)) for qid, user in prompts][1:]
            peak_rss[label] = server_peak_rss_mib(server.pid)
            return rows
        finally:
            server.terminate()
            server.wait()


def summary(key, label, rows):
    def p50(key):
        return statistics.median(r[key] for r in rows if r.get(key) is not None)
    generated = [r["predicted_n"] / (r["predicted_ms"] / 1000) for r in rows if r.get("predicted_ms")]
    drafted = sum(r.get("draft_n", 0) for r in rows)
    accepted = sum(r.get("draft_n_accepted", 0) for r in rows)
    print(f"{label}: {len(rows)} questions, first token p50 {p50('first'):.2f} s, turn p50 "
          f"{p50('total'):.2f} s, prompt {p50('prompt_n'):.0f} tokens in {p50('prompt_ms'):.0f} ms, "
          f"generated p50 {statistics.median(generated):.1f} tokens/s ({p50('predicted_n'):.0f} "
          f"tokens), drafted {drafted}, accepted {accepted}, server peak RSS "
          f"{peak_rss.get(key)} MiB", flush=True)


draft = ["-md", SMALL, "-td", "1", "-tbd", THREADS, "--spec-draft-n-min", "1"]
variants = [
    ("alone", "1.5B alone", []),
    ("draft4", "0.5B drafting, up to 4", ["--spec-type", "draft-simple", "--spec-draft-n-max", "4"] + draft),
    ("ngram", "n-grams of the prompt drafting", ["--spec-type", "ngram-simple"]),
]
results = {}
for key, label, extra in variants:
    results[key] = run(key, extra)
    summary(key, label, results[key])
for key, rows in results.items():
    if key != "alone":
        same = sum(a["text"] == b["text"] for a, b in zip(results["alone"], rows))
        print(f"same answer as the 1.5B alone, {key}: {same} of {len(rows)}")
with open(f"{OUT}/speculative.json", "w") as f:
    json.dump(results, f, indent=1)
