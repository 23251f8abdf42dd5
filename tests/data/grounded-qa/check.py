#!/usr/bin/env python3
"""Check questions.jsonl against the two corpora it is written for.

For every answerable question, at least one fact alternative must occur in the visible
text of the named file (HTML: tags stripped, <script>/<style> dropped, entities decoded;
case-insensitive, whitespace collapsed). Other alternatives must occur too or be a
formatting variant of one that does (spacing, punctuation, number words); facts found only
inside <pre> code blocks or inside the question are warned about. Also checks the line
shape, unique ids, minimum counts per source, that every demo file has a question, and
that the key terms of unanswerable questions occur in neither corpus (ABSENT).
Prints problems and counts; exits 1 on any error.

usage: python3 check.py [--dump FILE]   (--dump prints the visible text of a corpus file)
"""
import glob
import html
import json
import os
import re
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser

HERE = os.path.dirname(os.path.abspath(__file__))
DEMO = os.path.normpath(os.path.join(HERE, "..", "..", "..", "seeds", "demo"))


def book_dir():
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True,
                             text=True, check=True).stdout.strip()
    return os.path.join(sysroot, "share", "doc", "rust", "html", "book")


class Text(HTMLParser):
    SKIP = {"script", "style"}

    def __init__(self, skip_code=False):
        super().__init__(convert_charrefs=True)
        if skip_code:
            self.SKIP = self.SKIP | {"pre"}
        self.parts, self.skip = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        self.parts.append(" ")

    def handle_endtag(self, tag):
        if tag in self.SKIP and self.skip:
            self.skip -= 1
        self.parts.append(" ")

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def norm(s):
    return re.sub(r"\s+", " ", s).strip().lower()


def visible(path, skip_code=False):
    """Visible text of a corpus file, normalised; skip_code also drops HTML <pre> blocks."""
    with open(path, encoding="utf-8") as f:
        raw = f.read()
    if path.endswith((".html", ".htm")):
        p = Text(skip_code)
        p.feed(raw)
        p.close()
        raw = html.unescape("".join(p.parts))
    return norm(raw)


NUMBERS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}


def squash(s):
    """Formatting-insensitive form: number words as digits, no spaces/commas/dots/hyphens."""
    s = re.sub(r"[a-z]+", lambda m: NUMBERS.get(m.group(0), m.group(0)), s.lower())
    return re.sub(r"[\s,.\-_'’]", "", s)


# Unanswerable questions: terms that must not occur, so that no page can hold the answer.
# A plain string must be absent from both corpora; a (demo file, term) pair only from that
# file, for questions about a demo file that names the subject without giving the detail.
ABSENT = {
    "none-01": ["GOGC", "Go's garbage collector", "Go’s garbage collector"],
    "none-02": ["ethanol", "boiling"],
    "none-03": ["pandas", "DataFrame"],
    "none-04": ["Juno", "Jupiter"],
    "none-05": ["efConstruction", "efSearch"],
    "none-06": ["asyncio", "coroutine"],
    "none-07": ["International Space Station", "orbital period"],
    "none-08": ["PostgreSQL", "Postgres", "5432"],
    "none-09": ["Kotlin", "data class"],
    "none-10": ["delta-v", "Moon", "lunar"],
    "none-11": ["SQLite", "write-ahead"],
    "none-12": ["time to live", "time-to-live", ("reference/caching.html", "second"),
                ("reference/caching.html", "minute"), ("reference/caching.html", "hour")],
    "none-13": ["Philae lander was", ("data/missions.csv", "ended in"),
                ("data/missions.csv", "2016")],
    "none-14": [("data/glossary.json", "token"), ("data/glossary.json", "words"),
                ("data/glossary.json", "characters")],
    "none-15": ["LLVM", "--emit"],
    "none-16": ["non_exhaustive"],
    "none-17": ["rust-version", "minimum supported", "MSRV"],
    "none-18": ["lto", "link-time"],
    "none-19": ["wasm32", "rustup target"],
    "none-20": ["transmute"],
    "none-21": ["stack size", "MiB"],
    "none-22": ["rust-toolchain", "toolchain file"],
    "none-23": ["repr(C)", "#[repr"],
    "none-24": ["worker_threads", "multi-thread"],
    "none-25": ["RUSTFLAGS"],
    "none-26": ["Polonius", "non-lexical"],
    "none-27": ["serde", "Serialize"],
    "none-28": ["cargo tree"],
    "none-29": ["codegen"],
    "none-30": ["rayon", "par_iter"],
    "none-31": ["max_width", "rustfmt.toml"],
    "none-32": ["MaybeUninit"],
    "none-33": ["unsafe_code", "#![forbid"],
    "none-34": ["launch mass", "kilogram"],
    "none-35": ["Mars"],
    "none-36": ["k1"],
    "none-37": ["product quantization", "quantiz"],
}


def corpus_files(book):
    """Every file of both corpora: demo files and the book's chapter pages."""
    demo = sorted(p for p in glob.glob(os.path.join(DEMO, "**", "*"), recursive=True)
                  if os.path.isfile(p))
    chapters = sorted(p for pat in ("ch*.html", "appendix-*.html")
                      for p in glob.glob(os.path.join(book, pat)))
    return demo, chapters


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--dump":
        f = sys.argv[2]
        path = f if os.path.exists(f) else os.path.join(book_dir(), f)
        print(visible(path))
        return 0
    book = book_dir()
    demo_paths, chapter_paths = corpus_files(book)
    chapters = {os.path.basename(p) for p in chapter_paths}
    roots = {"demo": DEMO, "rust-book": book}
    errors, warnings = [], []
    ids, per_source, files = Counter(), Counter(), {}
    cache, prose_cache = {}, {}
    with open(os.path.join(HERE, "questions.jsonl"), encoding="utf-8") as f:
        lines = [l for l in f if l.strip()]
    for n, line in enumerate(lines, 1):
        q = json.loads(line)
        qid = q.get("id", f"line {n}")
        ids[qid] += 1
        facts = q.get("facts")
        if not isinstance(q.get("question"), str) or not isinstance(facts, list):
            errors.append(f"{qid}: needs question and facts")
            continue
        if qid.startswith("none-"):
            per_source["none"] += 1
            if facts or "source" in q or "file" in q:
                errors.append(f"{qid}: unanswerable questions have no source, file or facts")
            if qid not in ABSENT:
                errors.append(f"{qid}: no absent terms listed in ABSENT")
            continue
        src, rel = q.get("source"), q.get("file")
        if src not in roots or not rel:
            errors.append(f"{qid}: unknown source {src!r} or missing file")
            continue
        if src == "rust-book" and rel not in chapters:
            errors.append(f"{qid}: {rel} is not a chapter page of the book")
            continue
        path = os.path.join(roots[src], rel)
        if not os.path.isfile(path):
            errors.append(f"{qid}: missing file {path}")
            continue
        per_source[src] += 1
        files.setdefault(src, set()).add(rel)
        if not 1 <= len(facts) <= 3:
            errors.append(f"{qid}: needs 1-3 facts, has {len(facts)}")
        if path not in cache:
            cache[path] = visible(path)
            prose_cache[path] = visible(path, skip_code=True)
        text, prose, qtext = cache[path], prose_cache[path], norm(q["question"])
        found = [a for a in facts if norm(a) in text]
        if not found:
            errors.append(f"{qid}: no fact found in {rel}: {facts}")
        elif not any(norm(a) in prose for a in found):
            warnings.append(f"{qid}: facts occur only inside code blocks of {rel}")
        for a in facts:
            if a in found:
                if norm(a) in qtext:
                    warnings.append(f"{qid}: fact {a!r} appears in the question")
            elif not any(squash(a) == squash(b) for b in found):
                warnings.append(f"{qid}: alternative {a!r} not in {rel} and not a formatting variant")
    for qid, c in ids.items():
        if c > 1:
            errors.append(f"{qid}: id used {c} times")
    if ABSENT:
        texts = {p: cache.get(p) or visible(p) for p in demo_paths + chapter_paths}
        for qid, terms in ABSENT.items():
            for t in terms:
                scope = texts
                if isinstance(t, tuple):
                    scope = {os.path.join(DEMO, t[0]): texts[os.path.join(DEMO, t[0])]}
                    t = t[1]
                hits = [os.path.basename(p) for p, txt in scope.items() if norm(t) in txt]
                if hits:
                    errors.append(f"{qid}: term {t!r} occurs in {hits[:5]}")
    for what, have, need in (("demo questions", per_source["demo"], 12),
                             ("rust-book questions", per_source["rust-book"], 52),
                             ("rust-book files", len(files.get("rust-book", ())), 30),
                             ("unanswerable questions", per_source["none"], 14)):
        if have < need:
            errors.append(f"only {have} {what}, need at least {need}")
    missing = {os.path.relpath(p, DEMO) for p in demo_paths} - files.get("demo", set())
    if missing:
        errors.append(f"demo files without a question: {sorted(missing)}")
    for w in warnings:
        print("warning:", w)
    for e in errors:
        print("ERROR:", e)
    for src in ("demo", "rust-book"):
        print(f"{src}: {per_source[src]} questions over {len(files.get(src, ()))} files")
    print(f"none: {per_source['none']} unanswerable questions")
    print("FAIL" if errors else "OK", f"({len(errors)} errors, {len(warnings)} warnings)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
