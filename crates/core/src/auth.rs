//! Principals and authorization: who is asking, and which collections they may read.
//!
//! Three kinds of principal, as the tool manual has them: the local administrator (whoever runs
//! Quarry on this machine), personal API keys (a user's own), and service keys that act for a
//! named user. Each has a [`Scope`]: the collections it may read and a sensitivity ceiling.
//! A service key acting for a user gets the intersection of its own scope and that user's, so
//! it can never see more than the person it acts for, and only for the users it was created
//! for ([`ApiKey::acts_for`]; [`ANY_USER`] when the administrator chose every user). Every
//! retrieval, fetch and `ctx` operation is filtered by the caller's scope.
//!
//! Keys are random, shown once at creation, and stored only as a SHA-256 hash with a short
//! public prefix for lookup.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::names::{Name, NameKind};
use crate::store::{now_unix, ApiKeyRow, Collection, NewApiKeyRow, Store};

/// Sensitivity labels, lowest first. A collection's label must be at or below a principal's
/// ceiling for the principal to read it.
pub const SENSITIVITY_LEVELS: &[&str] = &["public", "internal", "confidential", "restricted"];

/// The rank of a sensitivity label; unknown labels rank highest, so they are never leaked.
pub fn sensitivity_rank(label: &str) -> usize {
    SENSITIVITY_LEVELS
        .iter()
        .position(|l| *l == label)
        .unwrap_or(SENSITIVITY_LEVELS.len())
}

/// Checks a sensitivity label.
pub fn validate_sensitivity(field: &str, label: &str) -> Result<()> {
    if SENSITIVITY_LEVELS.contains(&label) {
        Ok(())
    } else {
        Err(Error::InvalidSetting {
            field: field.into(),
            reason: format!("`{label}` is not one of {}", SENSITIVITY_LEVELS.join(", ")),
        })
    }
}

/// What a principal may read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct Scope {
    /// Collection names it may read; `None`: every collection.
    pub collections: Option<Vec<String>>,
    /// The highest sensitivity label it may read.
    pub sensitivity_ceiling: String,
}

impl Scope {
    /// Everything.
    pub fn unrestricted() -> Scope {
        Scope {
            collections: None,
            sensitivity_ceiling: SENSITIVITY_LEVELS[SENSITIVITY_LEVELS.len() - 1].into(),
        }
    }

    /// Whether the scope lets its holder read `collection`.
    pub fn allows(&self, collection: &Collection) -> bool {
        self.allows_named(&collection.name, &collection.sensitivity)
    }

    /// [`Scope::allows`] by name and label.
    pub fn allows_named(&self, name: &str, sensitivity: &str) -> bool {
        let listed = self
            .collections
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == name));
        listed && sensitivity_rank(sensitivity) <= sensitivity_rank(&self.sensitivity_ceiling)
    }

    /// What both scopes allow.
    pub fn intersect(&self, other: &Scope) -> Scope {
        let collections = match (&self.collections, &other.collections) {
            (None, None) => None,
            (Some(a), None) => Some(a.clone()),
            (None, Some(b)) => Some(b.clone()),
            (Some(a), Some(b)) => Some(a.iter().filter(|n| b.contains(n)).cloned().collect()),
        };
        let ceiling = if sensitivity_rank(&self.sensitivity_ceiling)
            <= sensitivity_rank(&other.sensitivity_ceiling)
        {
            self.sensitivity_ceiling.clone()
        } else {
            other.sensitivity_ceiling.clone()
        };
        Scope {
            collections,
            sensitivity_ceiling: ceiling,
        }
    }
}

/// The kind of principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum PrincipalKind {
    /// Whoever runs Quarry on this machine.
    Administrator,
    /// A user's own API key.
    Personal,
    /// A service key acting for a named user.
    Service,
}

/// Who is asking.
#[derive(Debug, Clone, Serialize)]
pub struct Principal {
    /// The kind.
    pub kind: PrincipalKind,
    /// A stable id: `admin`, `key:<id>`, or `key:<id>@<user>` for a service key.
    pub id: String,
    /// For people: `administrator`, the key's name, or `<service key> for <user>`.
    pub label: String,
    /// What it may read.
    pub scope: Scope,
}

impl Principal {
    /// The local administrator: every collection, every label.
    pub fn administrator() -> Principal {
        Principal {
            kind: PrincipalKind::Administrator,
            id: "admin".into(),
            label: "administrator".into(),
            scope: Scope::unrestricted(),
        }
    }

    /// This caller within `collections` as well (`None`: no narrowing): what it may read is
    /// what both allow, never more than its own scope.
    pub fn within_collections(&self, collections: Option<&[String]>) -> Principal {
        let mut narrowed = self.clone();
        if let Some(kept) = collections {
            narrowed.scope.collections = Some(match &self.scope.collections {
                None => kept.to_vec(),
                Some(own) => own.iter().filter(|c| kept.contains(c)).cloned().collect(),
            });
        }
        narrowed
    }
}

/// What a service key's `acts_for` lists when it may act for every user.
pub const ANY_USER: &str = "*";

/// An API key as listed (never the secret).
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct ApiKey {
    /// Row id.
    pub id: i64,
    /// Unique name.
    pub name: String,
    /// `personal` or `service`.
    pub kind: PrincipalKind,
    /// The user a personal key belongs to (its name when not given).
    pub user: Option<String>,
    /// The public part of the key, for recognising it.
    pub prefix: String,
    /// What it may read.
    pub scope: Scope,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds, when revoked.
    pub revoked_at: Option<i64>,
    /// For a service key, the users it may act for (`["*"]`: every user; `None`: a key made
    /// before keys named them, which acts for every user too). `None` for a personal key.
    pub acts_for: Option<Vec<String>>,
}

impl ApiKey {
    /// Whether this service key may act for `user`.
    pub fn may_act_for(&self, user: &str) -> bool {
        self.kind == PrincipalKind::Service
            && self
                .acts_for
                .as_ref()
                .is_none_or(|users| users.iter().any(|u| u == user || u == ANY_USER))
    }

    /// Whether this is a service key that may act for every user.
    pub fn acts_for_anyone(&self) -> bool {
        self.kind == PrincipalKind::Service
            && self
                .acts_for
                .as_ref()
                .is_none_or(|users| users.iter().any(|u| u == ANY_USER))
    }
}

/// A new key: the record and the secret, which is shown this once.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct CreatedKey {
    /// The stored record.
    pub key: ApiKey,
    /// The secret to hand to the user. Not stored anywhere.
    pub secret: String,
}

/// What a new key may do.
#[derive(Debug, Clone, Deserialize)]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub struct NewKey {
    /// Unique name.
    pub name: String,
    /// Personal or service.
    pub kind: PrincipalKind,
    /// The owner of a personal key (default: its name).
    pub user: Option<String>,
    /// What it may read.
    pub scope: Scope,
    /// For a service key (required): the users it may act for, or `["*"]` for every user.
    #[serde(default)]
    pub acts_for: Option<Vec<String>>,
}

fn key_from_row(r: ApiKeyRow) -> ApiKey {
    ApiKey {
        id: r.id,
        name: r.name,
        kind: if r.kind == "service" {
            PrincipalKind::Service
        } else {
            PrincipalKind::Personal
        },
        user: r.user,
        prefix: r.prefix,
        scope: Scope {
            // An unreadable list grants nothing, never everything.
            collections: r
                .collections
                .map(|c| serde_json::from_str(&c).unwrap_or_default()),
            sensitivity_ceiling: r.sensitivity_ceiling,
        },
        created_at: r.created_at,
        revoked_at: r.revoked_at,
        // An unreadable list lets it act for nobody, never for everyone.
        acts_for: r
            .acts_for
            .map(|users| serde_json::from_str(&users).unwrap_or_default()),
    }
}

/// The users a new key may act for, checked: a service key names at least one (or `*` alone),
/// a personal key none.
fn checked_acts_for(new: &NewKey) -> Result<Option<Vec<String>>> {
    let invalid = |reason: &str| Error::InvalidSetting {
        field: "acts_for".into(),
        reason: reason.into(),
    };
    let named: Vec<String> = new
        .acts_for
        .iter()
        .flatten()
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
        .collect();
    if new.kind != PrincipalKind::Service {
        if named.is_empty() {
            return Ok(None);
        }
        return Err(invalid("only a service key acts for other users"));
    }
    if named.is_empty() {
        return Err(invalid(
            "name the users a service key may act for (`*`: every user with a personal key)",
        ));
    }
    if named.iter().any(|u| u == ANY_USER) && named.len() > 1 {
        return Err(invalid("`*` (every user) stands alone"));
    }
    if let Some(bad) = named
        .iter()
        .find(|u| u.chars().count() > 64 || u.chars().any(|c| c.is_control() || c == ','))
    {
        return Err(invalid(&format!(
            "`{}` is not a user name (at most 64 characters, no commas or control characters)",
            bad.chars().take(64).collect::<String>()
        )));
    }
    let mut users = Vec::new();
    for user in named {
        if !users.contains(&user) {
            users.push(user);
        }
    }
    Ok(Some(users))
}

fn hash_secret(secret: &str) -> String {
    format!("{:x}", Sha256::digest(secret.as_bytes()))
}

pub(crate) fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Creates a key and returns its secret (shown once).
pub(crate) fn create_key(store: &Store, new: &NewKey) -> Result<CreatedKey> {
    Name::parse(NameKind::Key, &new.name).map_err(|bad| Error::InvalidSetting {
        field: "name".into(),
        reason: bad.to_string(),
    })?;
    if new.kind == PrincipalKind::Administrator {
        return Err(Error::InvalidSetting {
            field: "kind".into(),
            reason: "keys are `personal` or `service`; the administrator needs no key".into(),
        });
    }
    validate_sensitivity("ceiling", &new.scope.sensitivity_ceiling)?;
    let acts_for = checked_acts_for(new)?
        .map(|users| serde_json::to_string(&users).expect("strings serialize"));
    if let Some(names) = &new.scope.collections {
        for name in names {
            if store.collection_by_name(name)?.is_none() {
                return Err(Error::CollectionNotFound(name.clone()));
            }
        }
    }
    if store.api_key_name_exists(&new.name)? {
        return Err(Error::InvalidSetting {
            field: "name".into(),
            reason: format!("a key named `{}` already exists", new.name),
        });
    }
    let prefix = format!("qk_{}", random_hex(4)?);
    let secret = format!("{prefix}_{}", random_hex(24)?);
    let user = match new.kind {
        PrincipalKind::Personal => Some(new.user.clone().unwrap_or_else(|| new.name.clone())),
        _ => None,
    };
    let kind = match new.kind {
        PrincipalKind::Service => "service",
        _ => "personal",
    };
    let collections = new
        .scope
        .collections
        .as_ref()
        .map(|c| serde_json::to_string(c).expect("strings serialize"));
    store.insert_api_key(&NewApiKeyRow {
        name: &new.name,
        kind,
        user: user.as_deref(),
        prefix: &prefix,
        hash: &hash_secret(&secret),
        collections: collections.as_deref(),
        sensitivity_ceiling: &new.scope.sensitivity_ceiling,
        created_at: now_unix(),
        acts_for: acts_for.as_deref(),
    })?;
    let key = key_by_name(store, &new.name)?;
    Ok(CreatedKey { key, secret })
}

fn key_by_name(store: &Store, name: &str) -> Result<ApiKey> {
    store
        .api_key_by_name(name)?
        .map(key_from_row)
        .ok_or_else(|| Error::KeyNotFound(name.into()))
}

/// Every key, newest last.
pub(crate) fn keys(store: &Store) -> Result<Vec<ApiKey>> {
    Ok(store.api_keys()?.into_iter().map(key_from_row).collect())
}

/// Revokes a key by name; it stops working at once.
pub(crate) fn revoke_key(store: &Store, name: &str) -> Result<ApiKey> {
    key_by_name(store, name)?;
    store.revoke_api_key(name, now_unix())?;
    key_by_name(store, name)
}

/// Turns a key secret (and, for a service key, the user it acts for) into a principal.
pub(crate) fn authenticate(
    store: &Store,
    secret: &str,
    acting_for: Option<&str>,
) -> Result<Principal> {
    let prefix = secret
        .rsplit_once('_')
        .map(|(p, _)| p)
        .filter(|p| p.starts_with("qk_"))
        .ok_or_else(|| Error::Unauthorized("that is not a Quarry API key".into()))?;
    let found: Option<(ApiKey, String)> = store
        .api_key_by_prefix(prefix)?
        .map(|(row, hash)| (key_from_row(row), hash));
    let (key, hash) = found.ok_or_else(|| Error::Unauthorized("unknown API key".into()))?;
    if hash != hash_secret(secret) {
        return Err(Error::Unauthorized("unknown API key".into()));
    }
    if key.revoked_at.is_some() {
        return Err(Error::Unauthorized(format!(
            "API key `{}` was revoked",
            key.name
        )));
    }
    match key.kind {
        PrincipalKind::Service => {
            let user = acting_for.ok_or_else(|| {
                Error::Unauthorized(format!(
                    "service key `{}` must act for a user (pass --user NAME)",
                    key.name
                ))
            })?;
            if !key.may_act_for(user) {
                return Err(Error::Unauthorized(format!(
                    "service key `{}` may not act for `{user}`",
                    key.name
                )));
            }
            Ok(Principal {
                kind: PrincipalKind::Service,
                id: format!("key:{}@{user}", key.id),
                label: format!("{} for {user}", key.name),
                scope: acting_scope(store, &key.scope, user)?,
            })
        }
        _ => {
            if acting_for.is_some() {
                return Err(Error::Unauthorized(format!(
                    "`{}` is a personal key; only service keys act for another user",
                    key.name
                )));
            }
            Ok(Principal {
                kind: PrincipalKind::Personal,
                id: format!("key:{}", key.id),
                label: key.name.clone(),
                scope: key.scope,
            })
        }
    }
}

/// What a service key acting for `user` may read: each collection the key allows that at least
/// one of the user's active personal keys also allows (with that key's own ceiling), listed by
/// name. Collections created later are not included until the key is used again.
fn acting_scope(store: &Store, service: &Scope, user: &str) -> Result<Scope> {
    let user_scopes: Vec<Scope> = keys(store)?
        .into_iter()
        .filter(|k| {
            k.kind == PrincipalKind::Personal
                && k.revoked_at.is_none()
                && k.user.as_deref() == Some(user)
        })
        .map(|k| k.scope)
        .collect();
    if user_scopes.is_empty() {
        return Err(Error::Unauthorized(format!(
            "`{user}` has no active personal key, so a service key cannot act for them"
        )));
    }
    let readable = store
        .collections()?
        .into_iter()
        .filter(|c| service.allows(c) && user_scopes.iter().any(|u| u.allows(c)))
        .map(|c| c.name)
        .collect();
    Ok(Scope {
        collections: Some(readable),
        sensitivity_ceiling: service.sensitivity_ceiling.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(collections: Option<&[&str]>, ceiling: &str) -> Scope {
        Scope {
            collections: collections.map(|c| c.iter().map(|s| s.to_string()).collect()),
            sensitivity_ceiling: ceiling.into(),
        }
    }

    #[test]
    fn scopes_filter_by_name_and_label() {
        let s = scope(Some(&["a", "b"]), "internal");
        assert!(s.allows_named("a", "public"));
        assert!(s.allows_named("b", "internal"));
        assert!(!s.allows_named("b", "confidential"));
        assert!(!s.allows_named("c", "public"));
        assert!(
            !s.allows_named("a", "made-up-label"),
            "unknown labels never leak"
        );
    }

    #[test]
    fn intersection_takes_the_narrower_of_each() {
        let s =
            scope(Some(&["a", "b"]), "restricted").intersect(&scope(Some(&["b", "c"]), "public"));
        assert_eq!(s, scope(Some(&["b"]), "public"));
        let s = scope(None, "internal").intersect(&scope(Some(&["x"]), "restricted"));
        assert_eq!(s, scope(Some(&["x"]), "internal"));
    }

    fn key(
        store: &Store,
        name: &str,
        kind: PrincipalKind,
        acts_for: Option<&[&str]>,
    ) -> Result<CreatedKey> {
        create_key(
            store,
            &NewKey {
                name: name.into(),
                kind,
                user: None,
                scope: scope(None, "internal"),
                acts_for: acts_for.map(|u| u.iter().map(|s| s.to_string()).collect()),
            },
        )
    }

    /// Issue 38: a service key acted for anyone named in `X-Quarry-User`.
    #[test]
    fn a_service_key_acts_only_for_the_users_it_was_created_for() {
        let (_dir, store) = crate::store::test_support::temp_store();
        for user in ["alice", "bob"] {
            key(&store, user, PrincipalKind::Personal, None).unwrap();
        }
        let bot = key(&store, "bot", PrincipalKind::Service, Some(&["alice"])).unwrap();
        assert_eq!(bot.key.acts_for, Some(vec!["alice".to_string()]));
        assert!(!bot.key.acts_for_anyone());
        let alice = authenticate(&store, &bot.secret, Some("alice")).unwrap();
        assert_eq!(alice.label, "bot for alice");
        let err = authenticate(&store, &bot.secret, Some("bob")).unwrap_err();
        assert!(err.to_string().contains("may not act for `bob`"), "{err}");

        let anyone = key(&store, "anyone", PrincipalKind::Service, Some(&["*"])).unwrap();
        assert!(anyone.key.acts_for_anyone());
        authenticate(&store, &anyone.secret, Some("bob")).unwrap();

        for (name, kind, acts_for) in [
            ("unnamed", PrincipalKind::Service, None),
            ("empty", PrincipalKind::Service, Some(&[" "][..])),
            (
                "star-and-more",
                PrincipalKind::Service,
                Some(&["*", "bob"][..]),
            ),
            ("comma", PrincipalKind::Service, Some(&["a,b"][..])),
            ("personal", PrincipalKind::Personal, Some(&["bob"][..])),
        ] {
            let err = key(&store, name, kind, acts_for).unwrap_err();
            assert!(
                matches!(&err, Error::InvalidSetting { field, .. } if field == "acts_for"),
                "{name}: {err}"
            );
        }
    }
}
