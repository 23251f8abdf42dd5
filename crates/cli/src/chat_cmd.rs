//! `quarry chat` (one-shot, `--json`, or an interactive session) and
//! `quarry orchestrator show|edit|apply|revisions`.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use quarry_core::orchestrator::{
    self, BackendConfig, ChatOptions, OrchestratorConfig, TurnEvent, TurnResult, DEFAULT_CONFIG,
};
use quarry_core::{Library, Principal};

use crate::principal_arg::AsPrincipal;
use crate::terminal::{printable, printable_text, TextStream};

#[derive(Args)]
pub struct ChatArgs {
    /// The question; without it, an interactive session starts (one question per line)
    pub question: Option<String>,
    /// Continue this conversation
    #[arg(long, short = 'c')]
    pub conversation: Option<String>,
    /// The mode for a new conversation (see `quarry orchestrator show`)
    #[arg(long)]
    pub mode: Option<String>,
    /// The orchestrator configuration
    #[arg(long, default_value = DEFAULT_CONFIG)]
    pub config: String,
    /// Answer with this backend instead of the mode's: embedded, openai, ollama, extractive
    #[arg(long)]
    pub backend: Option<String>,
    /// Server URL for --backend openai (…/v1) or ollama
    #[arg(long)]
    pub base_url: Option<String>,
    /// Model: an installed model id or a GGUF path (embedded), a server's model name (openai, ollama)
    #[arg(long)]
    pub model: Option<String>,
    /// Environment variable holding the API key for --backend openai
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// With --backend openai: send GBNF grammars (llama.cpp's llama-server honours them)
    #[arg(long)]
    pub grammar: bool,
    /// Print the answer, citations and the trace as JSON
    #[arg(long)]
    pub json: bool,
    /// List your conversations instead
    #[arg(long, conflicts_with = "question")]
    pub list: bool,
    /// Show a conversation's messages, evidence and trace instead
    #[arg(long, conflicts_with = "question")]
    pub show: Option<String>,
    #[command(flatten)]
    pub who: AsPrincipal,
}

#[derive(Subcommand)]
pub enum OrchestratorCommand {
    /// Show a configuration's draft and its newest applied revision
    Show {
        #[arg(default_value = DEFAULT_CONFIG)]
        name: String,
        /// Show this revision instead of the draft
        #[arg(long)]
        revision: Option<i64>,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
    /// Replace a draft with a JSON file (checked; takes effect when applied)
    Edit {
        #[arg(default_value = DEFAULT_CONFIG)]
        name: String,
        /// The configuration file (JSON)
        #[arg(long)]
        file: PathBuf,
    },
    /// Apply the draft as a new immutable revision (snapshots the direct evidence tools)
    Apply {
        #[arg(default_value = DEFAULT_CONFIG)]
        name: String,
        /// Apply as this API key (recorded as who applied it; default: the administrator)
        #[command(flatten)]
        who: AsPrincipal,
    },
    /// List applied revisions, newest first
    Revisions {
        #[arg(default_value = DEFAULT_CONFIG)]
        name: String,
        /// Print JSON
        #[arg(long)]
        json: bool,
    },
}

fn backend_override(args: &ChatArgs) -> Result<Option<BackendConfig>> {
    let Some(kind) = args.backend.as_deref() else {
        if args.base_url.is_some() || args.model.is_some() {
            bail!("--base-url and --model go with --backend");
        }
        return Ok(None);
    };
    let need = |what: &str, v: &Option<String>| -> Result<String> {
        v.clone()
            .with_context(|| format!("--backend {kind} needs {what}"))
    };
    Ok(Some(match kind {
        "embedded" => BackendConfig::Embedded {
            model: args
                .model
                .clone()
                .unwrap_or_else(|| quarry_core::models::default_llm_model().to_string()),
            threads: None,
        },
        "openai" => BackendConfig::Openai {
            base_url: need("--base-url", &args.base_url)?,
            model: args.model.clone().unwrap_or_else(|| "default".into()),
            api_key_env: args.api_key_env.clone(),
            grammar: args.grammar,
        },
        "ollama" => BackendConfig::Ollama {
            base_url: need("--base-url", &args.base_url)?,
            model: need("--model", &args.model)?,
        },
        "extractive" => BackendConfig::Extractive,
        other => bail!("unknown backend `{other}`: embedded, openai, ollama or extractive"),
    }))
}

pub fn run_chat(args: &ChatArgs, library: &Library) -> Result<()> {
    let principal = args.who.principal(library)?;
    if args.list {
        return list(library, &principal, args.json);
    }
    if let Some(id) = &args.show {
        return show(library, &principal, id, args.json);
    }
    let mut options = ChatOptions::new(principal);
    options.conversation = args.conversation.clone();
    options.config = Some(args.config.clone());
    options.mode = args.mode.clone();
    options.backend = backend_override(args)?;
    match &args.question {
        Some(q) => {
            let result = turn(library, q, &options, args.json)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&result)?);
            }
        }
        None => {
            let stdin = std::io::stdin();
            eprintln!("Ask a question (Ctrl-D to end).");
            loop {
                eprint!("> ");
                let _ = std::io::stderr().flush();
                let mut line = String::new();
                if stdin.lock().read_line(&mut line)? == 0 {
                    break;
                }
                if line.trim().is_empty() {
                    continue;
                }
                match turn(library, &line, &options, args.json) {
                    Ok(result) => {
                        if args.json {
                            println!("{}", serde_json::to_string(&result)?);
                        }
                        options.conversation = Some(result.conversation);
                    }
                    Err(e) => eprintln!("error: {}", printable(&format!("{e:#}"))),
                }
            }
        }
    }
    Ok(())
}

/// The model's words stream as it writes them; the answer check may then drop or re-point a
/// sentence, or put a quote or a refusal in their place. When it did, what stands, to print
/// after the stream.
pub(crate) fn after_the_check(streamed: &str, answer: &str) -> Option<String> {
    (answer.trim() != streamed.trim())
        .then(|| format!("\nAfter the answer check:\n{}", printable_text(answer)))
}

/// Runs one turn, streaming the answer to stdout unless JSON was asked for.
fn turn(
    library: &Library,
    question: &str,
    options: &ChatOptions,
    json: bool,
) -> Result<TurnResult> {
    let mut out = std::io::stdout();
    // The answer quotes documents: escaped as it streams (see `terminal`).
    let mut answer = TextStream::default();
    let mut streamed = String::new();
    let mut on_event = |e: TurnEvent<'_>| {
        if json {
            return;
        }
        match e {
            TurnEvent::Token(t) => {
                streamed.push_str(t);
                let _ = out.write_all(answer.push(t).as_bytes());
                let _ = out.flush();
            }
            TurnEvent::ToolInvoke(tool) => eprintln!("· {} …", printable(tool)),
            TurnEvent::ToolResult { tool, admitted } => {
                eprintln!("· {}: {admitted} passage(s) admitted", printable(tool))
            }
            TurnEvent::Notice(n) => eprintln!("notice: {}", printable(n)),
            TurnEvent::Loading { model, bytes } => {
                eprintln!(
                    "· loading {} ({:.0} MB) …",
                    printable(model),
                    bytes as f64 / 1e6
                )
            }
        }
    };
    let result = library.chat(question, options, &mut on_event)?;
    if !json {
        print!("{}", answer.finish());
        println!();
        if let Some(checked) = after_the_check(&streamed, &result.answer) {
            println!("{checked}");
        }
        if result.citations.is_empty() {
            println!("(no citations)");
        }
        for c in &result.citations {
            println!("[{}] {}", c.n, printable(&c.locator));
        }
        eprintln!(
            "conversation {} · turn {} · {} · {} · {} ms",
            printable(&result.conversation),
            result.turn,
            printable(&result.backend),
            result.basis,
            result.took_ms
        );
    }
    Ok(result)
}

fn list(library: &Library, principal: &Principal, json: bool) -> Result<()> {
    let conversations = library.conversations(principal)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&conversations)?);
        return Ok(());
    }
    // The user's own conversations first; outside agents' sessions apart, by client.
    let line = |c: &quarry_core::orchestrator::Conversation, name: &str| {
        println!(
            "{}  {} r{} {}  {}",
            printable(&c.id),
            printable(&c.config),
            c.revision,
            printable(&c.mode),
            printable(name)
        )
    };
    let (agents, own): (Vec<_>, Vec<_>) =
        conversations.into_iter().partition(|c| c.client.is_some());
    own.iter().for_each(|c| line(c, &c.title));
    if !agents.is_empty() {
        println!("outside agents (MCP sessions):");
        agents
            .iter()
            .for_each(|c| line(c, c.client.as_deref().unwrap_or_default()));
    }
    Ok(())
}

fn show(library: &Library, principal: &Principal, id: &str, json: bool) -> Result<()> {
    let header = library.conversation(principal, id)?;
    let messages = library.conversation_messages(principal, id)?;
    let evidence = library.conversation_evidence(principal, id)?;
    let trace = library.conversation_trace(principal, id, None)?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "conversation": header, "messages": messages, "evidence": evidence, "trace": trace,
            }))?
        );
        return Ok(());
    }
    println!(
        "{} ({} revision {}, mode {})",
        printable(&header.title),
        printable(&header.config),
        header.revision,
        printable(&header.mode)
    );
    for m in messages {
        println!("\n{}: {}", printable(&m.role), printable_text(&m.content));
    }
    println!("\nevidence:");
    for e in evidence {
        println!(
            "  [{}] {} (turn {}, by {})",
            e.n,
            printable(&e.locator()),
            e.turn,
            printable(&e.admitted_by)
        );
    }
    println!("\ntrace:");
    for t in trace {
        println!(
            "  turn {} {} {}",
            t.turn,
            printable(&t.kind),
            printable(&t.detail.to_string())
        );
    }
    Ok(())
}

pub fn run_orchestrator(command: OrchestratorCommand, library: &Library) -> Result<()> {
    match command {
        OrchestratorCommand::Show {
            name,
            revision,
            json,
        } => {
            let (label, config) = match revision {
                Some(n) => (
                    format!("revision {n}"),
                    library.orchestrator_revision(&name, Some(n))?.config,
                ),
                None => ("draft".to_string(), library.orchestrator_draft(&name)?),
            };
            let applied = library.orchestrator_revision(&name, None).ok();
            if json {
                println!("{}", config.to_json());
                return Ok(());
            }
            println!("{} ({label})", printable(&name));
            match &applied {
                Some(a) => println!(
                    "newest applied: revision {} by {} at {}{}",
                    a.revision,
                    printable(&a.applied_by),
                    a.applied_at,
                    if revision.is_none() && a.config != config {
                        " (the draft has unapplied changes)"
                    } else {
                        ""
                    }
                ),
                None => println!("never applied"),
            }
            if let (None, Some(a)) = (revision, &applied) {
                for c in orchestrator::diff(&a.config, &config) {
                    let show = |v: &Option<String>| {
                        printable(v.as_deref().unwrap_or("(none)")).into_owned()
                    };
                    println!(
                        "  changed {}: {} → {}",
                        printable(&c.path),
                        show(&c.before),
                        show(&c.after)
                    );
                }
            }
            println!("default mode: {}", printable(&config.default_mode));
            for m in &config.modes {
                println!(
                    "\nmode {}: {}",
                    printable(&m.name),
                    printable(&m.description)
                );
                println!("  backend: {}", printable(&m.backend.describe()));
                println!("  tools chosen by: {:?}", m.tool_choice);
                println!(
                    "  pipeline: {}",
                    printable(m.pipeline.as_deref().unwrap_or("-"))
                );
                if let Some(ks) = &m.knowledge_search {
                    // `{:?}` escapes control characters itself.
                    println!(
                        "  {}: namespaces {:?}, top_k {}",
                        printable(&ks.tool_name),
                        ks.namespaces,
                        ks.top_k
                    );
                }
                println!("  direct tools: {}", printable(&m.direct_tools.join(", ")));
                let b = m.budget;
                println!(
                    "  budget: {} rounds, {} tool calls, {} query variants, {} evidence tokens, {} answer tokens",
                    b.rounds, b.tool_calls, b.query_variants, b.evidence_tokens, b.answer_tokens
                );
            }
            let problems = library.orchestrator_problems(&config);
            for p in problems {
                println!("problem: {}", printable(&p));
            }
        }
        OrchestratorCommand::Edit { name, file } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let config = OrchestratorConfig::parse(&text)
                .with_context(|| format!("{} is not a valid configuration", file.display()))?;
            library
                .set_orchestrator_draft(&name, &config)
                .with_context(|| format!("{} is not a valid configuration", file.display()))?;
            let name = printable(&name);
            println!("draft of {name} saved; apply it with `quarry orchestrator apply {name}`");
        }
        OrchestratorCommand::Apply { name, who } => {
            let principal = who.principal(library)?;
            let applied = library.apply_orchestrator(&name, &principal)?;
            println!(
                "applied {} as revision {} (by {}); new conversations use it, running ones keep theirs",
                printable(&name),
                applied.revision,
                printable(&applied.applied_by)
            );
        }
        OrchestratorCommand::Revisions { name, json } => {
            let list = library.orchestrator_revisions(&name)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
                return Ok(());
            }
            for r in list {
                println!(
                    "revision {}  by {}  at {}  modes: {}",
                    r.revision,
                    printable(&r.applied_by),
                    r.applied_at,
                    printable(&r.modes.join(", "))
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod check_tests {
    use super::after_the_check;

    #[test]
    fn what_the_check_changed_is_printed_after_the_stream_and_nothing_else() {
        assert_eq!(after_the_check("An answer [1].\n", "An answer [1]."), None);
        let shown = after_the_check(
            "Ethanol boils at 78 C [1]. It is 4 bar [2].",
            "It is 4 bar [2].\u{1b}[2J",
        )
        .unwrap();
        assert_eq!(shown, "\nAfter the answer check:\nIt is 4 bar [2].\\x1b[2J");
    }
}
