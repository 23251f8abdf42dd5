#!/usr/bin/env python3
"""Prints the side-by-side table from the peer's and Quarry's figures (run.sh writes them).

usage: compare.py PEER_INDEX_JSON PEER_QUERY_JSON QUARRY_JSON

Embedding speed is compared per token the model was given to read: the peer cuts 200-word
passages at 256 tokens, Quarry embeds whole chunks of up to 200 tokens, so chunk counts differ.
"""
import json
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    peer = json.load(open(sys.argv[1]))
    peer_query = json.load(open(sys.argv[2]))
    quarry = json.load(open(sys.argv[3]))
    lane = quarry.get("last_embedding_event") or {}
    if not lane.get("done"):
        sys.exit("Quarry's embedding lane did not finish: no final embedding event in " + sys.argv[3])

    # Quarry: tokens of every chunk given a vector, and of those the model read (copies of a
    # text already embedded in the run take its vector).
    q_tokens = lane["tokens_this_run"]
    q_model_tokens = lane["model_tokens_this_run"]
    # The lane's own clock: from its start (calibration included) to its last chunk.
    q_rate = lane["tokens_per_sec"]
    q_embed_s = q_tokens / q_rate
    q_model_rate = q_model_tokens / q_embed_s
    p_rate = peer["tokens_per_s"]
    p_first = peer["seconds"]["total"]

    rows = [
        ("files", peer["files_indexed"], quarry["status"]["stats"]["documents_indexed"], None),
        ("passages / chunks embedded", peer["chunks"], lane["embedded_this_run"], None),
        ("tokens given a vector", peer["tokens"], q_tokens, None),
        ("tokens the model read", peer["tokens"], q_model_tokens, None),
        ("passages cut at 256 tokens", peer["chunks_truncated"], 0, None),
        ("embedding, tokens given a vector per s", f"{p_rate:,.0f}", f"{q_rate:,.0f}",
         q_rate / p_rate),
        ("embedding, tokens the model read per s", f"{p_rate:,.0f}", f"{q_model_rate:,.0f}",
         q_model_rate / p_rate),
        ("embedding, s", f"{peer['seconds']['embed']:.0f}", f"{q_embed_s:.0f}", None),
        ("all vectors done, s", f"{p_first:.0f}", f"{quarry['embedding_done_s']:.0f}", None),
        ("time until a search answers, s", f"{p_first:.0f}",
         f"{quarry['first_search_answered_s']:.2f}", p_first / quarry["first_search_answered_s"]),
        ("peak RSS while indexing, MiB", f"{peer['peak_rss_mib']:,.0f}",
         f"{quarry['index_peak_rss_mib']:,.0f}", peer["peak_rss_mib"] / quarry["index_peak_rss_mib"]),
    ]
    peer_one_shot = peer_query["cold"]["process_start_to_first_result_s"]
    for mode in ("lexical", "vector", "hybrid"):
        q = quarry[f"oneshot_{mode}_p50_s"]
        rows.append((f"one-shot {mode} query (process start → results), s",
                     f"{peer_one_shot:.2f}", f"{q:.2f}", peer_one_shot / q))

    print("| | peer (ChromaDB + MiniLM int8) | Quarry | Quarry's advantage |")
    print("|---|---|---|---|")
    for name, p, q, ratio in rows:
        fmt = lambda v: f"{v:,}" if isinstance(v, int) else str(v)
        print(f"| {name} | {fmt(p)} | {fmt(q)} | {'' if ratio is None else f'{ratio:.2f}×'} |")
    print()
    print(f"Embedding per token: Quarry {q_rate / p_rate:.2f}× the peer "
          f"(goal 1.3×); both with {peer['params']['ort_threads']} ONNX Runtime threads "
          f"({peer['params']['cpus']} CPUs).")


if __name__ == "__main__":
    main()
