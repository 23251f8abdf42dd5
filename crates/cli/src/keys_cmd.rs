//! `quarry keys`: create, list and revoke API keys (personal keys, and service keys acting for a
//! user).

use anyhow::Result;
use clap::Subcommand;
use quarry_core::auth::{NewKey, PrincipalKind, Scope};
use quarry_core::Library;

use crate::output::print_json;

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
            })?;
            if json {
                return print_json(&created);
            }
            println!("created {} key {}", kind, created.key.name);
            println!("secret (shown once, store it now): {}", created.secret);
        }
        KeysCommand::List { json } => {
            let keys = library.keys()?;
            if json {
                return print_json(&keys);
            }
            for k in keys {
                println!(
                    "{:<20} {:<9} {:<12} user {:<12} collections {:<20} ceiling {:<12} {}",
                    k.name,
                    format!("{:?}", k.kind).to_lowercase(),
                    k.prefix,
                    k.user.as_deref().unwrap_or("-"),
                    k.scope
                        .collections
                        .as_ref()
                        .map_or("all".into(), |c| c.join(",")),
                    k.scope.sensitivity_ceiling,
                    if k.revoked_at.is_some() {
                        "revoked"
                    } else {
                        "active"
                    }
                );
            }
        }
        KeysCommand::Revoke { name } => {
            library.revoke_key(&name)?;
            println!("revoked {name}");
        }
    }
    Ok(())
}
