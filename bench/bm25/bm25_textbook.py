"""Textbook BM25 over the text Quarry extracted, outside Quarry: the yardstick for "beats BM25".

Ranks whole documents with bm25s's Lucene BM25 (English stop words, Snowball stemming: the
usual BEIR baseline set-up) at k1=0.9 b=0.4 (Anserini's default) and k1=1.2 b=0.75 (the
textbook's), and scores nDCG@10 as `quarry eval` does (linear gains), over every judged query
and per group the set's queries name (metadata `split`, `style`, and both).

usage: python bm25_textbook.py SET CORPUS.jsonl [--json]
  SET          a BEIR folder (queries.jsonl, qrels/test.tsv)
  CORPUS.jsonl the documents as Quarry extracted them (`quarry eval --beir SET --export-corpus`)
"""

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import bm25s
import Stemmer

SETTINGS = [(0.9, 0.4), (1.2, 0.75)]


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def read_qrels(path):
    qrels = defaultdict(dict)
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            cols = line.rstrip("\n").split("\t")
            if i == 0 and cols[0] == "query-id" or len(cols) != 3:
                continue
            if int(cols[2]) > 0:
                qrels[cols[0]][cols[1]] = int(cols[2])
    return qrels


def ndcg_at_10(ranking, relevant):
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranking[:10]))
    ideal = sorted(relevant.values(), reverse=True)[:10]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def groups_of(query):
    meta = query.get("metadata") or {}
    split, style = meta.get("split"), meta.get("style")
    names = [n for n in (split, style) if n]
    if split and style:
        names.append(f"{split}/{style}")
    return names


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("set", type=Path)
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    docs = read_jsonl(args.corpus)
    ids = [d["_id"] for d in docs]
    texts = [(d.get("title") or "") + "\n" + d["text"] for d in docs]
    qrels = read_qrels(args.set / "qrels" / "test.tsv")
    queries = [q for q in read_jsonl(args.set / "queries.jsonl") if q["_id"] in qrels]
    stemmer = Stemmer.Stemmer("english")
    corpus_tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False)
    query_tokens = bm25s.tokenize(
        [q["text"] for q in queries], stopwords="en", stemmer=stemmer, show_progress=False
    )

    rows = []
    for k1, b in SETTINGS:
        retriever = bm25s.BM25(method="lucene", k1=k1, b=b)
        retriever.index(corpus_tokens, show_progress=False)
        found, _scores = retriever.retrieve(
            query_tokens, k=min(100, len(ids)), show_progress=False
        )
        per_group = defaultdict(list)
        for query, ranked in zip(queries, found):
            score = ndcg_at_10([ids[i] for i in ranked], qrels[query["_id"]])
            per_group["all"].append(score)
            for name in groups_of(query):
                per_group[name].append(score)
        rows.append(
            {
                "name": f"textbook bm25 k1={k1} b={b}",
                "groups": {
                    name: {"queries": len(s), "ndcg_at_10": sum(s) / len(s)}
                    for name, s in sorted(per_group.items())
                },
            }
        )
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return
    print(f"{len(ids)} documents, {len(queries)} judged queries; nDCG@10")
    for row in rows:
        print(row["name"])
        for name, g in row["groups"].items():
            label = f"{name} ({g['queries']})"
            print(f"  {label:<28} {g['ndcg_at_10']:.4f}")


if __name__ == "__main__":
    main()
