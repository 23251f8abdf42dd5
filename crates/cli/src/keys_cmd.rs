//! `quarry keys`: create, list and revoke API keys (personal keys, and service keys acting for a
//! user).

use anyhow::Result;
use clap::Subcommand;
use quarry_core::auth::{ApiKey, NewKey, PrincipalKind, Scope};
use quarry_core::Library;

use crate::output::print_json;
use crate::terminal::printable;

#[derive(Subcommand)]
pub enum KeysCommand {
    /// Create an API key (the secret is shown once)
    Create {
        name: String,
        /// personal or service
        #[arg(long, default_value = "personal", value_parser = ["personal", "service"])]
        kind: String,
        /// Owner of a personal key [default: its name]
        #[arg(long)]
        user: Option<String>,
        /// Collections it may read (comma-separated) [default: all]
        #[arg(long, value_delimiter = ',')]
        collections: Option<Vec<String>>,
        /// Highest sensitivity label it may read
        #[arg(long, default_value = "internal")]
        ceiling: String,
        /// A service key: the users it may act for (comma-separated; `*`: every user with a
        /// personal key)
        #[arg(long, value_delimiter = ',', value_name = "USERS")]
        acts_for: Option<Vec<String>>,
        #[arg(long)]
        json: bool,
    },
    /// List keys (never their secrets)
    List {
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key
    Revoke { name: String },
}

pub fn run_keys(command: KeysCommand, library: &Library) -> Result<()> {
    match command {
        KeysCommand::Create {
            name,
            kind,
            user,
            collections,
            ceiling,
            acts_for,
            json,
        } => {
            let created = library.create_key(&NewKey {
                name,
                kind: if kind == "service" {
                    PrincipalKind::Service
                } else {
                    PrincipalKind::Personal
                },
                user,
                scope: Scope {
                    collections,
                    sensitivity_ceiling: ceiling,
                },
                acts_for,
            })?;
            if json {
                return print_json(&created);
            }
            println!("created {} key {}", kind, printable(&created.key.name));
            if let Some(users) = acts_for_text(&created.key) {
                println!("it {users}");
            }
            println!("secret (shown once, store it now): {}", created.secret);
        }
        KeysCommand::List { json } => {
            let keys = library.keys()?;
            if json {
                return print_json(&keys);
            }
            for k in keys {
                println!(
                    "{:<20} {:<9} {:<12} user {:<12} collections {:<20} ceiling {:<12} {}{}",
                    printable(&k.name),
                    format!("{:?}", k.kind).to_lowercase(),
                    printable(&k.prefix),
                    printable(k.user.as_deref().unwrap_or("-")),
                    printable(
                        &k.scope
                            .collections
                            .as_ref()
                            .map_or("all".into(), |c| c.join(","))
                    ),
                    printable(&k.scope.sensitivity_ceiling),
                    if k.revoked_at.is_some() {
                        "revoked"
                    } else {
                        "active"
                    },
                    acts_for_text(&k)
                        .map(|text| format!("  ({text})"))
                        .unwrap_or_default()
                );
            }
        }
        KeysCommand::Revoke { name } => {
            library.revoke_key(&name)?;
            println!("revoked {}", printable(&name));
        }
    }
    Ok(())
}

/// Whom a service key may act for, said plainly (`None` for a personal key).
fn acts_for_text(key: &ApiKey) -> Option<String> {
    if key.kind != PrincipalKind::Service {
        return None;
    }
    let users = key.acts_for.as_deref().unwrap_or_default();
    Some(if key.acts_for_anyone() {
        "acts for ANY user who has a personal key (whoever --user or X-Quarry-User names)".into()
    } else if users.is_empty() {
        "acts for nobody".into()
    } else {
        format!("acts only for {}", printable(&users.join(", ")))
    })
}
