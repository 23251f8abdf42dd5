#!/usr/bin/env python3
"""Check questions.jsonl against the Rust Reference that ships with the toolchain.

The corpus is the set of pages that corpora.json's include globs select (gitignore-style, as
the app's walker reads them); the selection must hold no redirect stub, print.html, toc.html,
the test summary or the index.html copy of the introduction, and every other page with a
<main> must be selected.

For every answerable question, at least one fact alternative must occur in the visible text
of the named page: the page's <main> only (so the mdBook sidebar, menu bar, help popup and
page navigation do not count), <script>, <style>, <nav>, <svg> and the other non-text
elements the app's HTML extractor skips dropped, entities decoded, case-insensitive,
whitespace collapsed. Other alternatives must occur too or be a formatting variant of one
that does (spacing, punctuation, number words); facts found only inside <pre> code blocks
or inside the question are warned about. Also checks the line shape, unique ids, minimum
counts, and that the key terms of unanswerable questions (ABSENT) occur in no page of the
corpus (there the whole page's text counts, sidebar included).
Prints problems and counts; exits 1 on any error.

usage: python3 check.py [--dump FILE]   (--dump prints the visible text of a corpus page;
                                         FILE relative to the reference folder, or a path)
"""
import fnmatch
import json
import os
import re
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = "rust-reference"
MIN_ANSWERABLE, MIN_FILES, MIN_NONE = 64, 35, 16

# Elements whose content is not text (as in the app's extractor, crates/core/src/ingest/
# extract/markup.rs), and elements after which words do not run together.
SKIPPED = {"head", "script", "style", "noscript", "template", "nav", "svg", "button",
           "select", "form", "iframe", "canvas"}
BREAKS = {"p", "div", "section", "article", "main", "aside", "header", "footer", "li", "dt",
          "dd", "blockquote", "table", "tr", "td", "th", "ul", "ol", "dl", "figure",
          "figcaption", "details", "summary", "br", "hr", "body", "pre", "h1", "h2", "h3",
          "h4", "h5", "h6"}
# Pages of the folder that are not content: the one-page print copy, the sidebar's frame,
# the rule-coverage table, and index.html (a byte-for-byte copy of introduction.html).
NOT_CONTENT = {"print.html", "toc.html", "test-summary.html", "index.html", "404.html"}


def reference_dir():
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True,
                             text=True, check=True).stdout.strip()
    return os.path.join(sysroot, "share", "doc", "rust", "html", "reference")


class Text(HTMLParser):
    """Text of an HTML page. main_only: only inside <main>; skip_code: <pre> dropped too."""

    def __init__(self, main_only=True, skip_code=False):
        super().__init__(convert_charrefs=True)
        self.skipped = SKIPPED | {"pre"} if skip_code else SKIPPED
        self.main_only = main_only
        self.parts, self.skip, self.main = [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in self.skipped:
            self.skip += 1
        elif tag == "main":
            self.main += 1
        if tag in BREAKS:
            self.parts.append(" ")

    def handle_startendtag(self, tag, attrs):
        if tag in BREAKS:
            self.parts.append(" ")

    def handle_endtag(self, tag):
        if tag in self.skipped and self.skip:
            self.skip -= 1
        elif tag == "main" and self.main:
            self.main -= 1
        if tag in BREAKS:
            self.parts.append(" ")

    def handle_data(self, data):
        if not self.skip and (self.main or not self.main_only):
            self.parts.append(data)


def norm(s):
    return re.sub(r"\s+", " ", s).strip().lower()


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def visible(path, main_only=True, skip_code=False):
    """Visible text of a page, normalised (see Text)."""
    p = Text(main_only, skip_code)
    p.feed(read(path))
    p.close()
    return norm("".join(p.parts))


NUMBERS = {w: str(i) for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}


def squash(s):
    """Formatting-insensitive form: number words as digits, no spaces/commas/dots/hyphens."""
    s = re.sub(r"[a-z]+", lambda m: NUMBERS.get(m.group(0), m.group(0)), s.lower())
    return re.sub(r"[\s,.\-_'’`#\[\]()]", "", s)


# Unanswerable questions: terms that must not occur in any page of the corpus, so that no
# page can hold the answer.
ABSENT = {
    'none-01': ["rustup", "toolchain install"],
    'none-02': ["crates.io", "cargo publish", "API token"],
    'none-03': ["tokio", "async runtime"],
    'none-04': ["growth factor", "reallocat", "amortized"],
    'none-05': ["SipHash", "hashing algorithm", "HashDoS"],
    'none-06': ["opt-level"],
    'none-07': ["max_width", "line width"],
    'none-08': ["needless_borrow"],
    'none-09': ["garbage collect", "GOGC", "golang"],
    'none-10': ["Global Interpreter Lock"],
    'none-11': ["stack size", "RUST_MIN_STACK"],
    'none-12': ["workspace"],
    'none-13': ["incremental"],
    'none-14': ["serde(rename", "rename_all"],
    'none-15': ["rust-version", "MSRV", "minimum supported"],
    'none-16': ["Kotlin", "hashCode"],
    'none-17': ["doctest", "doc test", "documentation test"],
    'none-18': ["Mutex", "poison"],
    'none-19': ["LTO", "link-time optimization"],
}


def glob_matches(glob, rel):
    """Whether a gitignore-style include glob selects the file `rel` (slash-separated):
    a glob with a `/` is anchored to the folder and `*` does not cross a `/`; one without
    matches the file name at any depth."""
    g = glob.lstrip("/")
    if "/" in glob:
        return g.count("/") == rel.count("/") and fnmatch.fnmatchcase(rel, g)
    return fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], g)


def corpus(root):
    """The pages corpora.json selects, and problems with the selection."""
    with open(os.path.join(HERE, "corpora.json"), encoding="utf-8") as f:
        spec = json.load(f)
    problems = []
    if set(spec) - {"about", "sources"}:
        problems.append(f"corpora.json: unknown keys {sorted(set(spec) - {'about', 'sources'})}")
    sources = spec.get("sources", [])
    if [s.get("name") for s in sources] != [SOURCE]:
        problems.append(f"corpora.json: expected the one source {SOURCE!r}")
        return [], problems
    src = sources[0]
    if set(src) - {"name", "folder", "include"}:
        problems.append(f"corpora.json: unknown source keys {sorted(set(src))}")
    if src.get("folder") != "{rustc_sysroot}/share/doc/rust/html/reference":
        problems.append(f"corpora.json: unexpected folder {src.get('folder')!r}")
    include = src.get("include", [])
    every, selected = [], []
    for d, _, names in os.walk(root):
        for n in names:
            rel = os.path.relpath(os.path.join(d, n), root).replace(os.sep, "/")
            every.append(rel)
            if not include or any(glob_matches(g, rel) for g in include):
                selected.append(rel)
    for rel in sorted(selected):
        page = read(os.path.join(root, rel)) if rel.endswith(".html") else ""
        if not rel.endswith(".html"):
            problems.append(f"include selects a file that is not a page: {rel}")
        elif rel.rsplit("/", 1)[-1] in NOT_CONTENT:
            problems.append(f"include selects {rel}, which is not a content page")
        elif 'http-equiv="refresh"' in page or "<main>" not in page:
            problems.append(f"include selects {rel}, a redirect stub or page without <main>")
    for rel in sorted(set(every) - set(selected)):
        if (rel.endswith(".html") and rel.rsplit("/", 1)[-1] not in NOT_CONTENT
                and "<main>" in read(os.path.join(root, rel))
                and 'http-equiv="refresh"' not in read(os.path.join(root, rel))):
            problems.append(f"include leaves out the content page {rel}")
    return sorted(selected), problems


def main():
    root = reference_dir()
    if len(sys.argv) == 3 and sys.argv[1] == "--dump":
        f = sys.argv[2]
        print(visible(f if os.path.exists(f) else os.path.join(root, f)))
        return 0
    pages, errors = corpus(root)
    pages_set = set(pages)
    warnings = []
    ids, counts, files = Counter(), Counter(), Counter()
    cache, prose_cache = {}, {}
    with open(os.path.join(HERE, "questions.jsonl"), encoding="utf-8") as f:
        lines = [l for l in f if l.strip()]
    for n, line in enumerate(lines, 1):
        try:
            q = json.loads(line)
        except json.JSONDecodeError as e:
            errors.append(f"line {n}: not JSON: {e}")
            continue
        qid = q.get("id", f"line {n}")
        ids[qid] += 1
        facts = q.get("facts")
        if not isinstance(q.get("question"), str) or not isinstance(facts, list):
            errors.append(f"{qid}: needs question and facts")
            continue
        allowed = {"id", "question", "facts", "source", "file"}
        if set(q) - allowed:
            errors.append(f"{qid}: unknown keys {sorted(set(q) - allowed)}")
        if qid.startswith("none-"):
            counts["none"] += 1
            if facts or "source" in q or "file" in q:
                errors.append(f"{qid}: unanswerable questions have no source, file or facts")
            if not ABSENT.get(qid):
                errors.append(f"{qid}: no absent terms listed in ABSENT")
            continue
        if not re.fullmatch(r"ref-\d{2,}", qid):
            errors.append(f"{qid}: answerable ids are ref-NN")
        rel = q.get("file")
        if q.get("source") != SOURCE or not rel:
            errors.append(f"{qid}: source must be {SOURCE!r} and file given")
            continue
        if rel not in pages_set:
            errors.append(f"{qid}: {rel} is not a page of the corpus")
            continue
        counts[SOURCE] += 1
        files[rel] += 1
        if not 1 <= len(facts) <= 3 or not all(isinstance(a, str) and a.strip() for a in facts):
            errors.append(f"{qid}: needs 1-3 non-empty facts, has {facts!r}")
            continue
        path = os.path.join(root, rel)
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
            if norm(a) in qtext:
                warnings.append(f"{qid}: fact {a!r} appears in the question")
            if found and a not in found and not any(squash(a) == squash(b) for b in found):
                warnings.append(f"{qid}: alternative {a!r} not in {rel} and not a formatting variant")
    for qid, c in ids.items():
        if c > 1:
            errors.append(f"{qid}: id used {c} times")
    for qid in ABSENT:
        if qid not in ids:
            errors.append(f"ABSENT lists {qid}, which is not a question")
    if ABSENT:
        texts = {rel: visible(os.path.join(root, rel), main_only=False) for rel in pages}
        for qid, terms in ABSENT.items():
            for t in terms:
                hits = [rel for rel, txt in texts.items() if norm(t) in txt]
                if hits:
                    errors.append(f"{qid}: term {t!r} occurs in {hits[:5]}")
    for what, have, need in (("answerable questions", counts[SOURCE], MIN_ANSWERABLE),
                             ("pages with a question", len(files), MIN_FILES),
                             ("unanswerable questions", counts["none"], MIN_NONE)):
        if have < need:
            errors.append(f"only {have} {what}, need at least {need}")
    for w in warnings:
        print("warning:", w)
    for e in errors:
        print("ERROR:", e)
    print(f"corpus: {len(pages)} pages selected by corpora.json")
    print(f"{SOURCE}: {counts[SOURCE]} questions over {len(files)} pages")
    print(f"none: {counts['none']} unanswerable questions")
    print("FAIL" if errors else "OK", f"({len(errors)} errors, {len(warnings)} warnings)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
