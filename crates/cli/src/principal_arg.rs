//! Who a command runs as (`--as KEY [--user USER]`), shared by every command that reads the
//! library on someone's behalf.

use anyhow::{bail, Result};
use clap::Args;
use quarry_core::{Library, Principal};

/// Who a command runs as: the administrator unless a key is given.
#[derive(Args, Clone)]
pub struct AsPrincipal {
    /// Run as this API key (a personal key, or a service key with --user)
    #[arg(long = "as", env = "QUARRY_KEY", hide_env_values = true)]
    key: Option<String>,
    /// With a service key: the user it acts for
    #[arg(long)]
    user: Option<String>,
}

impl AsPrincipal {
    pub fn principal(&self, library: &Library) -> Result<Principal> {
        match &self.key {
            Some(key) => Ok(library.authenticate(key, self.user.as_deref())?),
            None if self.user.is_some() => bail!("--user needs a service key (--as KEY)"),
            None => Ok(Principal::administrator()),
        }
    }
}
