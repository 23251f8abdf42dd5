#!/usr/bin/env python3
"""Writes the identifier set: near-identical documents that differ only in an identifier
(error codes, part numbers, ticket ids, function names, note markers), and queries that name
one identifier each, alone or in a sentence. Exactly one document holds each identifier, and
it must come first. Deterministic: the same files every run.

    python3 tests/data/identifiers/make.py
"""
import json
import pathlib
import random

HERE = pathlib.Path(__file__).resolve().parent
rng = random.Random(21)

# Each family: a document template, identifiers, and query templates. The documents of a
# family share every word but the identifier, as a folder of similar notes does.
FAMILIES = [
    (
        "Compiler error {id} occurs when a value is borrowed as mutable while it is also "
        "borrowed as immutable. End the first borrow before the second one begins.",
        [f"E{n:04d}" for n in rng.sample(range(100, 800), 60)],
        ["{id}", "how do I fix error {id}", "what causes {id} in my build"],
    ),
    (
        "Replacement part {id} fits the pump housing of the coolant loop and ships in a "
        "sealed bag with two gaskets and a torque card.",
        [f"{p}-{n}" for p, n in zip(rng.choices(["XR", "KT", "PV"], k=60),
                                    rng.sample(range(100, 999), 60))],
        ["{id}", "which pump takes part {id}", "order {id} gaskets"],
    ),
    (
        "Ticket #{id}: the export button fails when the quarterly report has no rows. "
        "Reported by the finance team; reproduced on the staging server.",
        [str(n) for n in rng.sample(range(1000, 9999), 60)],
        ["#{id}", "status of ticket #{id}", "who reported #{id}"],
    ),
    (
        "The function {id} reads the header block of an incoming message, checks its "
        "length field and returns the parsed fields or an error.",
        [f"parse_header_v{n}" if i % 2 else f"readHeaderBlock{n}"
         for i, n in enumerate(rng.sample(range(2, 500), 60))],
        ["{id}", "what does {id} return", "where is {id} defined"],
    ),
    (
        "# Field note\n\nObservation {id} was logged at the station. The weather held "
        "steady and the instruments were read at the usual hours. Wind came from the north-west "
        "at about twelve knots, the barometer fell slowly through the afternoon, and the "
        "relief crew arrived with fresh batteries for the rain gauge before dusk.",
        [f"m{n}x" for n in rng.sample(range(100, 999), 60)],
        ["{id}", "observation {id}", "when was {id} logged"],
    ),
]

corpus, queries, qrels = [], [], []
for f, (template, ids, asks) in enumerate(FAMILIES):
    for i, ident in enumerate(ids):
        doc_id = f"f{f}d{i}"
        corpus.append({"_id": doc_id, "title": "", "text": template.format(id=ident)})
        # Every fifth document is asked about, in turn by each phrasing: 12 queries a family.
        if i % 5 == 0:
            q_id = f"q{len(queries) + 1}"
            queries.append({"_id": q_id, "text": asks[(i // 5) % len(asks)].format(id=ident)})
            qrels.append((q_id, doc_id))

with open(HERE / "corpus.jsonl", "w") as out:
    for doc in corpus:
        out.write(json.dumps(doc) + "\n")
with open(HERE / "queries.jsonl", "w") as out:
    for q in queries:
        out.write(json.dumps(q) + "\n")
with open(HERE / "qrels" / "test.tsv", "w") as out:
    out.write("query-id\tcorpus-id\tscore\n")
    for q, d in qrels:
        out.write(f"{q}\t{d}\t1\n")
print(f"{len(corpus)} documents, {len(queries)} queries")
