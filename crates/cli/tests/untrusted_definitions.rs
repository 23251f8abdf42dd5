//! Issue 38, the fragile items: definitions that come from someone else's file. A tool export
//! may not point `ctx.http_get` at this machine or its networks (cloud metadata, loopback
//! services) without the administrator's confirmation, nor list origins without bound; a model
//! import may not take a catalogue model's id (and shadow the sha256-pinned model) or a
//! Windows device name.
//!
//! Code tools need Python 3 (`QUARRY_PYTHON` or `python3` on the PATH); no model is needed.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};

/// An action tool that fetches a URL from its allowlist.
const FETCHER: &str = "from quarry import BaseModel\nclass Inputs(BaseModel):\n    url: str\nclass Output(BaseModel):\n    value: str = ''\nasync def run(input, ctx):\n    r = await ctx.http_get(input['url'])\n    return {'value': r['body']}\n";

/// Runs quarry expecting exit code 2; returns (code, the `error…` line).
fn fails(env: &TestEnv, args: &[&str]) -> (String, String) {
    let out = env.run(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(2),
        "quarry {args:?} should fail\n--- stdout\n{}\n--- stderr\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    let line = stderr
        .lines()
        .find(|l| l.starts_with("error"))
        .unwrap_or_else(|| panic!("quarry {args:?}: no error line\n{stderr}"))
        .to_string();
    let code = line
        .strip_prefix("error[")
        .and_then(|rest| rest.split_once(']'))
        .map(|(code, _)| code.to_string())
        .unwrap_or_default();
    (code, line)
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// An export file holding the fetcher under `slug` with these origins.
fn tool_file(dir: &Path, slug: &str, egress: &[String]) -> PathBuf {
    let path = dir.join(format!("{slug}-{}.json", egress.len()));
    write(
        &path,
        json!({"format": "quarry-tool", "version": 1, "tools": [{
            "slug": slug, "name": "Fetcher", "type": "action", "source": FETCHER,
            "egress": egress,
        }]})
        .to_string(),
    );
    path
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn issue_38_tool_import_refuses_egress_to_this_machine_unless_confirmed() {
    let env = TestEnv::new();
    let dir = tempfile::tempdir().unwrap();
    for origin in [
        "http://169.254.169.254",
        "http://127.0.0.1:8080",
        "http://localhost:11434",
        "http://[::1]",
        "http://10.0.0.5",
        "http://192.168.1.1",
        "http://metadata.google.internal",
        "http://0.0.0.0",
        "http://[fe80::1]",
    ] {
        let file = tool_file(
            dir.path(),
            "fetcher",
            &strings(&["https://api.example.com", origin]),
        );
        let (code, message) = fails(&env, &["tools", "import", s(&file)]);
        assert_eq!(code, "invalid_tool_file", "{message}");
        assert!(
            message.contains(&format!("`{origin}`")),
            "the error names the origin: {message}"
        );
        assert!(message.contains("--allow-private-egress"), "{message}");
        let (code, _) = fails(&env, &["tools", "show", "fetcher"]);
        assert_eq!(code, "tool_not_found", "nothing was imported");
    }

    // The administrator confirms: imported, and recorded in the audit log.
    let origins = strings(&["https://api.example.com", "http://169.254.169.254"]);
    let file = tool_file(dir.path(), "fetcher", &origins);
    env.ok(&["tools", "import", s(&file), "--allow-private-egress"]);
    let tool = env.json(&["tools", "show", "fetcher"]);
    assert_eq!(tool["egress"], json!(origins));
    let audit = env.json(&["audit", "--action", "tool.private_egress"]);
    let records = audit.as_array().unwrap();
    assert_eq!(records.len(), 1, "{audit:#}");
    assert_eq!(records[0]["target"], "fetcher");
    assert!(
        records[0]["detail"]
            .as_str()
            .unwrap()
            .contains("http://169.254.169.254"),
        "{audit:#}"
    );

    // Editing other fields keeps the confirmed origin without asking again.
    env.ok(&["tools", "edit", "fetcher", "--description", "reads things"]);
    // A new private origin through `tools edit` needs the confirmation too.
    let (code, message) = fails(
        &env,
        &[
            "tools",
            "edit",
            "fetcher",
            "--egress",
            "http://192.168.0.10",
        ],
    );
    assert_eq!(code, "invalid_tool", "{message}");
    assert!(message.contains("`http://192.168.0.10`"), "{message}");
    env.ok(&[
        "tools",
        "edit",
        "fetcher",
        "--egress",
        "http://192.168.0.10",
        "--allow-private-egress",
    ]);
    assert_eq!(
        env.json(&["tools", "show", "fetcher"])["egress"],
        json!(["http://192.168.0.10"])
    );

    // And through `tools create`.
    let source = dir.path().join("fetch.py");
    write(&source, FETCHER);
    let create = [
        "tools",
        "create",
        "other",
        "--type",
        "action",
        "--source",
        s(&source),
        "--egress",
        "http://127.0.0.1:9",
    ];
    let (code, message) = fails(&env, &create);
    assert_eq!(code, "invalid_tool", "{message}");
    assert!(message.contains("`http://127.0.0.1:9`"), "{message}");
    let mut confirmed = create.to_vec();
    confirmed.push("--allow-private-egress");
    env.ok(&confirmed);
    let audit = env.json(&["audit", "--action", "tool.private_egress"]);
    assert_eq!(audit.as_array().unwrap().len(), 3, "{audit:#}");
}

#[test]
fn issue_38_tool_egress_lists_are_bounded() {
    let env = TestEnv::new();
    let dir = tempfile::tempdir().unwrap();
    let many = |n: usize| -> Vec<String> {
        (0..n)
            .map(|i| format!("https://host{i}.example.com"))
            .collect()
    };
    for n in [65, 200_000] {
        let file = tool_file(dir.path(), "wide", &many(n));
        for confirm in [false, true] {
            let mut args = vec!["tools", "import", s(&file)];
            if confirm {
                args.push("--allow-private-egress");
            }
            let (code, message) = fails(&env, &args);
            assert_eq!(code, "invalid_tool_file", "{message}");
            assert!(
                message.contains(&format!("lists {n} origins")) && message.contains("at most 64"),
                "{message}"
            );
        }
    }
    let file = tool_file(dir.path(), "wide", &many(64));
    env.ok(&["tools", "import", s(&file)]);
    let tool: Value = env.json(&["tools", "show", "wide"]);
    assert_eq!(tool["egress"].as_array().unwrap().len(), 64);
}

#[test]
fn issue_38_models_import_refuses_catalogue_ids_and_device_names() {
    let env = TestEnv::new();
    // Never the checkout's shared models/cache: a missing refusal would overwrite its model.
    let models = tempfile::tempdir().unwrap();
    let quarry = |args: &[&str]| {
        let mut cmd = env.command(args);
        cmd.env("QUARRY_MODELS_DIR", models.path());
        cmd.output().unwrap()
    };
    let gguf = env.docs().join("mine.gguf");
    write(&gguf, b"GGUF\x03\x00\x00\x00 header only");
    let list: Value =
        serde_json::from_slice(&quarry(&["models", "list", "--json"]).stdout).unwrap();
    let chat = list
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["kind"] == "llm" && m["default"] == true)
        .or_else(|| list.as_array().unwrap().iter().find(|m| m["kind"] == "llm"))
        .expect("the catalogue has a chat model")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let import = |id: &str| quarry(&["models", "import", s(&gguf), "--kind", "llm", "--id", id]);

    let out = import(&chat);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("error[invalid_model]"), "{stderr}");
    assert!(stderr.contains(&format!("`{chat}`")), "{stderr}");
    assert!(stderr.contains("catalogue model"), "{stderr}");
    assert!(
        !models.path().join(&chat).exists(),
        "nothing was installed under the catalogue id"
    );

    for id in [
        "con",
        "NUL",
        "com1",
        "LPT9.gguf",
        "aux.txt",
        "..",
        ".",
        "a/b",
    ] {
        let out = import(id);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "--id {id}: {stderr}");
        assert!(
            stderr.contains("error[invalid_model]"),
            "--id {id}: {stderr}"
        );
    }
    let out = import("my-chat");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(models.path().join("my-chat/model.gguf").is_file());
}
