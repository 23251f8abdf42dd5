//! Issue 38, item 6: a file's name and text reach the terminal only as visible escapes, never
//! as control sequences (clear the screen, retitle the terminal, overwrite a line, reverse
//! text), while `--json` keeps them exact; logs written to a pipe carry no colour codes.
//!
//! Indexes with `--no-embed` and searches lexically, so no model is needed.

mod common;

use std::process::Output;

use common::*;

/// OSC title, clear screen, carriage return and a right-to-left override.
const HOSTILE: &str = "\x1b]0;pwned\x07\x1b[2J\r\u{202e}";

/// What no human-readable output may contain raw.
const RAW: &[(&str, char)] = &[
    ("ESC", '\x1b'),
    ("BEL", '\x07'),
    ("CR", '\r'),
    ("U+202E", '\u{202e}'),
    ("C1 CSI", '\u{9b}'),
];

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_no_raw_controls(what: &str, out: &str) {
    for (name, c) in RAW {
        assert!(
            !out.contains(*c),
            "{what}: a raw {name} reached the terminal:\n{out:?}"
        );
    }
}

fn ok(out: Output, what: &str) -> Output {
    assert!(
        out.status.success(),
        "{what} failed with {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

#[test]
fn issue_38_control_characters_from_files_reach_the_terminal_only_escaped() {
    let env = TestEnv::new();
    let name = format!("evil{HOSTILE}txt.md");
    let path = env.docs().join(&name);
    write(
        &path,
        format!(
            "# Quarterly {HOSTILE} zanzibar\n\nThe zanzibar ledger {HOSTILE} balances\rFAKE LINE \
             and \u{9b}2J more.\n"
        ),
    );
    // A file that fails, so its name shows among the status's recent problems.
    let broken_name = format!("broken{HOSTILE}.pdf");
    write(&env.docs().join(&broken_name), "not a pdf at all");
    env.add_docs_source("notes");
    env.ok(&["index", "--no-embed"]);

    // search: the human listing escapes, the JSON keeps every byte.
    let human = env.ok(&["search", "--mode", "lexical", "zanzibar"]);
    assert_no_raw_controls("search", &human);
    assert!(
        human.contains("\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\u{202e}txt.md"),
        "the name is shown with visible escapes:\n{human}"
    );
    assert!(human.contains("zanzibar"), "{human}");
    let json = env.json(&["search", "--mode", "lexical", "zanzibar"]);
    let hit = &json["hits"][0];
    assert!(
        hit["path"].as_str().unwrap().ends_with(&name),
        "--json keeps the name exact: {hit:#}"
    );

    // doc show: the path, the title and the chunk text.
    let path_arg = path.as_os_str();
    let out = ok(
        env.command(&["doc", "show"])
            .arg(path_arg)
            .output()
            .unwrap(),
        "doc show",
    );
    let shown = text(&out.stdout);
    assert_no_raw_controls("doc show", &shown);
    assert!(shown.contains("\\x1b]0;pwned\\x07"), "{shown}");
    let out = ok(
        env.command(&["doc", "show", "--json"])
            .arg(path_arg)
            .output()
            .unwrap(),
        "doc show --json",
    );
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        view["document"]["path"].as_str().unwrap().ends_with(&name),
        "{view:#}"
    );

    // status: the failed file's name among the recent problems.
    let status = env.ok(&["status"]);
    assert_no_raw_controls("status", &status);
    assert!(
        status.contains("broken\\x1b]0;pwned"),
        "the failed file is listed, escaped:\n{status}"
    );
    let json = env.status();
    assert!(
        json["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["path"].as_str().unwrap().ends_with(&broken_name)),
        "{json:#}"
    );

    // An error that names the file.
    let missing = env.docs().join(format!("missing{HOSTILE}.md"));
    let out = env
        .command(&["doc", "show"])
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_no_raw_controls("an error", &text(&out.stderr));
}

#[test]
fn issue_38_logs_to_a_pipe_carry_no_colour() {
    let env = TestEnv::new();
    write(&env.docs().join("a.md"), "# A\n\nplain text\n");
    env.add_docs_source("notes");
    let out = ok(
        env.command(&["index", "--no-embed"])
            .env("QUARRY_LOG", "debug")
            .env_remove("NO_COLOR")
            .output()
            .unwrap(),
        "index",
    );
    let logs = text(&out.stderr);
    assert!(
        logs.contains("DEBUG") || logs.contains("INFO"),
        "the run logged something to check:\n{logs}"
    );
    assert!(
        !logs.contains("\x1b["),
        "colour codes in logs written to a pipe:\n{logs:?}"
    );
}
