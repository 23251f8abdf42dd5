#!/usr/bin/env python3
"""Quarry's side of the peer benchmark: index the same file list the peer indexed, and time it.

usage: quarry_side.py QUARRY MANIFEST [--json OUT]

Copies the manifest's files into a throwaway tree (same relative layout), adds it as one source
of a fresh library, runs `quarry index --progress json` under /usr/bin/time, and records from
the event stream: first batch committed (first searchable), lexical pass done, embeddings done.
A parallel prober runs `quarry search` until the first hit comes back, which is the honest
"time until the first search answers". Then 30 queries (bench/peer/queries.txt) one process
each, and a warm p50 from `quarry bench search` if it exists.
"""
import argparse, json, os, shutil, subprocess, sys, tempfile, threading, time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("quarry")
    ap.add_argument("manifest")
    ap.add_argument("--json")
    a = ap.parse_args()
    files = [l.strip() for l in open(a.manifest) if l.strip()]
    common = os.path.commonpath(files)
    tree = tempfile.mkdtemp(prefix="quarry-peer-tree.")
    for f in files:
        dst = os.path.join(tree, os.path.relpath(f, common))
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(f, dst)
    lib = tempfile.mkdtemp(prefix="quarry-peer-lib.")
    env = dict(os.environ, QUARRY_DATA_DIR=lib)
    q = a.quarry
    subprocess.run([q, "source", "add", tree, "--collection", "peer"], env=env, check=True,
                   stdout=subprocess.DEVNULL)

    marks = {}
    t0 = time.monotonic()
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            r = subprocess.run([q, "search", "ownership borrowing", "--mode", "lexical", "--json",
                                "--limit", "1"], env=env, capture_output=True, text=True)
            if r.returncode == 0 and '"path"' in r.stdout:
                marks.setdefault("first_search_answered_s", time.monotonic() - t0)
                return
            time.sleep(0.05)

    th = threading.Thread(target=probe, daemon=True)
    th.start()
    timef = tempfile.mktemp(prefix="quarry-peer-time.")
    p = subprocess.Popen(["/usr/bin/time", "-f", "%M %e", "-o", timef, q, "index", "--progress",
                          "json"], env=env, stdout=subprocess.PIPE, text=True)
    last_embed = None
    for line in p.stdout:
        now = time.monotonic() - t0
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        kind = ev.get("event") or ev.get("type") or next(iter(ev), "")
        if "batch" in str(kind).lower() or "BatchCommitted" in line[:40]:
            marks.setdefault("first_batch_committed_s", now)
        if kind == "embedding":
            last_embed = ev
            marks.setdefault("embedding_started_s", now)
            if ev.get("done"):
                marks["embedding_done_s"] = now
        else:
            marks["last_lexical_event_s"] = now
    p.wait()
    stop.set()
    rss_kb, wall = open(timef).read().split()[:2]
    marks["index_wall_s"] = float(wall)
    marks["index_peak_rss_mib"] = int(rss_kb) / 1024
    marks["index_rc"] = p.returncode
    if last_embed:
        marks["last_embedding_event"] = last_embed
    st = subprocess.run([q, "status", "--json"], env=env, capture_output=True, text=True)
    try:
        marks["status"] = json.loads(st.stdout)
    except ValueError:
        marks["status_raw"] = st.stdout[-2000:]

    # Cold one-shot searches: process start -> result, per mode.
    queries = [l.strip() for l in open(os.path.join(HERE, "queries.txt")) if l.strip()]
    for mode in ("lexical", "vector", "hybrid"):
        lat = []
        for qq in queries:
            s = time.monotonic()
            subprocess.run([q, "search", qq, "--mode", mode, "--json", "--limit", "10"], env=env,
                           capture_output=True)
            lat.append(time.monotonic() - s)
        lat.sort()
        marks[f"oneshot_{mode}_p50_s"] = lat[len(lat) // 2]
    marks["library"] = lib
    marks["tree"] = tree
    out = json.dumps(marks, indent=1, default=str)
    print(out)
    if a.json:
        open(a.json, "w").write(out)


if __name__ == "__main__":
    sys.exit(main())
