"""A real MCP client (the official Python SDK) driving a real `quarry mcp`.

Run by crates/cli/tests/mcp.rs, which builds the library and the keys and passes them in the
environment:

  QUARRY_BIN, QUARRY_DATA_DIR   the binary and the library
  READER_KEY                    a personal key that may read the `demo` collection only
  REVOKED_KEY                   a key revoked before the run
  PRIVATE_DOC                   the id of a document in the `private` collection
  NOTES_DIR                     a folder of the `demo` collection the client may edit
  MCP_URL                       (http) the running server's URL

  python3 mcp_client.py stdio | http

Each check prints `ok: ...`; the first failure raises, so the exit status says it all.
"""

import asyncio
import json
import os
import subprocess
import sys

import httpx
from jsonschema import Draft202012Validator
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client
from mcp.shared.exceptions import McpError

CLIENT = types.Implementation(name="quarry-test-client", version="1.0")
QUESTION = "How does an LRU cache evict entries?"
FETCH_TOOLS = {
    "search_documents",
    "fetch_source_document",
    "fetch_document_chunks",
    "fetch_neighbors",
    "context_expansion",
}


def ok(what):
    print(f"ok: {what}", flush=True)


def text_of(result):
    assert len(result.content) == 1, result
    return result.content[0].text


async def call(session, tool, arguments):
    result = await session.call_tool(tool, arguments)
    return result.isError, text_of(result)


async def exercise(session):
    """Everything one session must do; returns what later checks reuse."""
    tools = {t.name: t for t in (await session.list_tools()).tools}
    assert {"knowledge_search", "run_pipeline"} | FETCH_TOOLS <= set(tools), sorted(tools)
    ks = tools["knowledge_search"].inputSchema
    assert ks["type"] == "object" and ks["required"] == ["query"], ks
    assert ks["properties"]["query"]["type"] == "string", ks
    paging = tools["fetch_document_chunks"].inputSchema
    assert paging["properties"]["sources"]["type"] == "array", paging
    assert tools["knowledge_search"].annotations.readOnlyHint is True
    ok(f"tools listed with their input schemas: {sorted(tools)}")
    # Strict clients validate the tool list: `"enum": null` once made it invalid (issue 38).
    for tool in tools.values():
        Draft202012Validator.check_schema(tool.inputSchema)
    ok("every advertised input schema is valid JSON Schema (draft 2020-12)")

    failed, text = await call(session, "knowledge_search", {"query": QUESTION})
    assert not failed, text
    output = json.loads(text)
    results = output["results"]
    assert results, output
    assert [r["rank"] for r in results] == list(range(1, len(results) + 1)), results
    similarities = [r["similarity"] for r in results]
    assert similarities == sorted(similarities, reverse=True), similarities
    assert any("lru" in r["content"].lower() for r in results), results
    for r in results:
        assert r["namespace"] == "demo", r
        assert r["evidence_ref"] and r["sourceRef"], r
    ok(f"knowledge_search ranked {len(results)} passages, each with its references")

    failed, text = await call(session, "knowledge_search", {"query": "   "})
    assert failed and text == 'Error: "query argument required"', text
    failed, text = await call(
        session, "knowledge_search", {"query": QUESTION, "namespaces": ["private"]}
    )
    assert failed and text == 'Error: "no valid namespaces selected"', text
    ok("the manual's error strings for an empty query and for no valid namespaces")

    source_ref = results[0]["sourceRef"]
    paging = {"sources": [{"source_ref": source_ref}]}
    failed, text = await call(session, "fetch_document_chunks", paging)
    assert failed and "qualifying pipeline" in text, text
    ok("fetch tools wait for a qualifying pipeline")

    failed, text = await call(session, "run_pipeline", {"query": QUESTION})
    assert not failed, text
    ran = json.loads(text)  # a result over the output length gate loses whole passages, never half a string
    evidence = ran["evidence"]
    assert evidence and len(text) <= 12000, text
    ok(f"run_pipeline: {len(evidence)} passages, {len(text)} characters ({ran.get('left_out', 'none left out')})")
    failed, text = await call(session, "fetch_document_chunks", paging)
    assert not failed, text
    pages = json.loads(text)
    chunks = [c for page in pages["pages"] for c in page["chunks"]]
    assert chunks and all(c["text"] for c in chunks), pages
    ok(f"fetch_document_chunks paged {len(chunks)} chunks with a returned reference")

    forged = source_ref[:-4] + ("AAAA" if not source_ref.endswith("AAAA") else "BBBB")
    failed, text = await call(
        session, "fetch_document_chunks", {"sources": [{"source_ref": forged}]}
    )
    assert "reject" in text.lower() and '"text": "' not in text.replace('"text": ""', ""), text
    ok(f"a forged reference is refused: {text[:160]}")

    secret = "vault combination quartermaster"
    failed, text = await call(session, "run_pipeline", {"query": secret})
    shown = json.loads(text)["evidence"] if not failed else []
    assert all("quartermaster" not in e["content"].lower() for e in shown), text
    failed, text = await call(session, "knowledge_search", {"query": secret})
    assert not failed, text
    for r in json.loads(text)["results"]:
        assert r["namespace"] == "demo" and "quartermaster" not in r["content"].lower(), r
    ok("a key limited to one collection never sees another")

    failed, text = await call(session, "run_pipeline", {"query": "heliograph deploy api key"})
    assert not failed and "heliograph" in text, text
    assert "sk-live" not in text and "[REDACTED]" in text, text
    ok("the mode's gates redact a secret before the client sees it")

    listed = (await session.list_resources()).resources
    uris = [str(r.uri) for r in listed]
    assert uris and all(u.startswith("quarry://doc/") for u in uris), uris
    read = await session.read_resource(uris[0])
    assert read.contents[0].text.strip(), read
    ok(f"{len(uris)} cited documents listed and readable as resources")
    for doc in [os.environ["PRIVATE_DOC"], "999999"]:
        try:
            await session.read_resource(f"quarry://doc/{doc}")
            raise AssertionError(f"quarry://doc/{doc} was readable outside the key's scope")
        except McpError as e:
            # The same words as for a document that does not exist: nothing is disclosed.
            assert str(e) == f"no indexed document at `quarry://doc/{doc}`", e
    ok("a document outside the key's scope reads as one that does not exist")
    # Resources are the documents the session cited, as the instructions say: not a way
    # around retrieval to any document in scope (issue 38).
    note = os.path.join(os.environ["NOTES_DIR"], "uncited.md")
    with open(note, "w") as f:
        f.write("# Rhubarb\n\nForce rhubarb under an upturned bucket in February.\n")
    quarry("index")
    uncited = json.loads(quarry("doc", "show", note, "--json"))["document"]["id"]
    try:
        await session.read_resource(f"quarry://doc/{uncited}")
        raise AssertionError(f"quarry://doc/{uncited} was readable without being cited")
    except McpError as e:
        assert str(e) == f"no indexed document at `quarry://doc/{uncited}`", e
    ok("a document in scope but not cited in the session reads as one that does not exist")
    return {"source_ref": source_ref}


def quarry(*args):
    return subprocess.run(
        [os.environ["QUARRY_BIN"], "--data-dir", os.environ["QUARRY_DATA_DIR"], *args],
        check=True,
        capture_output=True,
    ).stdout


async def stale_reference_is_refused(session):
    """A reference to a document that has changed since is refused, not served stale."""
    failed, text = await call(session, "run_pipeline", {"query": "heliograph deploy"})
    assert not failed, text
    deploy = [e for e in json.loads(text)["evidence"] if "deploy.md" in e["source"]]
    assert deploy, text
    note = os.path.join(os.environ["NOTES_DIR"], "deploy.md")
    with open(note, "a") as f:
        f.write("\nThe heliograph now restarts weekly.\n")
    quarry("index")
    failed, text = await call(
        session, "fetch_document_chunks", {"sources": [{"sourceRef": deploy[0]["sourceRef"]}]}
    )
    assert "the document has changed since" in text, text
    ok("a reference to a document that changed since is refused")


async def over_stdio():
    server = StdioServerParameters(
        command=os.environ["QUARRY_BIN"],
        args=["--data-dir", os.environ["QUARRY_DATA_DIR"], "mcp", "--mode", "agent"],
        env={**os.environ, "QUARRY_KEY": os.environ["READER_KEY"], "QUARRY_LOG": "info"},
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, client_info=CLIENT) as session:
            await session.initialize()
            await exercise(session)
            await stale_reference_is_refused(session)
            # The key is checked on every request: revoked mid-session, it stops working.
            quarry("keys", "revoke", "reader")
            try:
                await session.call_tool("knowledge_search", {"query": QUESTION})
                raise AssertionError("a key revoked mid-session still searched")
            except McpError as e:
                assert "revoked" in str(e), e
            ok("a key revoked mid-session gets an MCP error, never data")


def http_session(key, extra=None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    headers.update(extra or {})
    return streamablehttp_client(os.environ["MCP_URL"], headers=headers)


async def over_http():
    url = os.environ["MCP_URL"]
    async with http_session(os.environ["READER_KEY"]) as (read, write, _):
        async with ClientSession(read, write, client_info=CLIENT) as session:
            await session.initialize()
            first = await exercise(session)

    # References are bound to the session that issued them.
    async with http_session(os.environ["READER_KEY"]) as (read, write, _):
        async with ClientSession(read, write, client_info=CLIENT) as session:
            await session.initialize()
            await session.call_tool("run_pipeline", {"query": QUESTION})
            failed, text = await call(
                session,
                "fetch_document_chunks",
                {"sources": [{"source_ref": first["source_ref"]}]},
            )
            assert "belongs to another run or conversation" in text, text
            ok("another session's reference is refused")

    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "a web page", "version": "0"},
        },
    }
    headers = {
        "Authorization": f"Bearer {os.environ['READER_KEY']}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    async with httpx.AsyncClient() as web:
        # Without a valid key, `initialize` opens no session (issue 38): the refusal comes
        # before the SDK, as HTTP 401 with a JSON-RPC error.
        for key, expected in [(None, "Bearer"), (os.environ["REVOKED_KEY"], "revoked")]:
            keyless = {k: v for k, v in headers.items() if k != "Authorization"}
            if key:
                keyless["Authorization"] = f"Bearer {key}"
            refused = await web.post(url, json=initialize, headers=keyless)
            assert refused.status_code == 401, (refused.status_code, refused.text)
            assert "mcp-session-id" not in refused.headers, refused.headers
            assert expected in refused.json()["error"]["message"], refused.text
        ok("a missing or revoked key opens no session and gets an error, never data")
        same = await web.post(url, json=initialize, headers=headers)
        assert same.status_code == 200, same.text
        foreign = await web.post(
            url, json=initialize, headers={**headers, "Origin": "http://evil.example"}
        )
        assert foreign.status_code == 403, (foreign.status_code, foreign.text)
        rebound = await web.post(
            url, json=initialize, headers={**headers, "Host": "evil.example"}
        )
        assert rebound.status_code == 403, (rebound.status_code, rebound.text)
    ok("a foreign Origin and a foreign Host are refused")


if __name__ == "__main__":
    asyncio.run({"stdio": over_stdio, "http": over_http}[sys.argv[1]]())
