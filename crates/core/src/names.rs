//! The rule for names people give things, written once: collections, pipelines, orchestrator
//! configurations and their modes, conversations, the function name a model calls, tool slugs
//! and key names. Every name is 1 to 64 characters from its kind's set; a name that passes is a
//! [`Name`], so code that holds one needs no second check.

use std::fmt;

/// The longest name of any kind, in bytes (every allowed character is ASCII).
pub const MAX_NAME_LEN: usize = 64;

/// What is being named. The kind decides the characters allowed and how errors call it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    /// A collection.
    Collection,
    /// A pipeline.
    Pipeline,
    /// An orchestrator configuration.
    Configuration,
    /// A mode of an orchestrator configuration.
    Mode,
    /// A conversation (its id is chosen by the client).
    Conversation,
    /// The function name a model sees for a tool (`knowledge_search.tool_name`).
    Function,
    /// A tool's slug, its unique id.
    Tool,
    /// A key's name: a person's e-mail address fits.
    Key,
}

/// The characters a kind allows.
#[derive(Clone, Copy)]
enum Charset {
    /// Letters, digits, `-`, `_` and `.`.
    Dotted,
    /// Letters, digits, `-` and `_`: what function-calling APIs accept.
    Plain,
    /// Lower-case letters, digits, `-` and `_`, starting with a letter or digit.
    Slug,
    /// Letters, digits, `-`, `_`, `.` and `@`.
    Address,
}

impl NameKind {
    fn charset(self) -> Charset {
        match self {
            NameKind::Collection | NameKind::Pipeline => Charset::Dotted,
            NameKind::Configuration
            | NameKind::Mode
            | NameKind::Conversation
            | NameKind::Function => Charset::Plain,
            NameKind::Tool => Charset::Slug,
            NameKind::Key => Charset::Address,
        }
    }

    /// How messages call a name of this kind ("a collection name").
    pub fn noun(self) -> &'static str {
        match self {
            NameKind::Collection => "collection name",
            NameKind::Pipeline => "pipeline name",
            NameKind::Configuration => "configuration name",
            NameKind::Mode => "mode name",
            NameKind::Conversation => "conversation id",
            NameKind::Function => "function name",
            NameKind::Tool => "tool slug",
            NameKind::Key => "key name",
        }
    }

    /// The rule in words, for messages and help text.
    pub fn rule(self) -> &'static str {
        match self.charset() {
            Charset::Dotted => "1 to 64 letters, digits, `-`, `_` or `.`",
            Charset::Plain => "1 to 64 letters, digits, `-` or `_`",
            Charset::Slug => {
                "1 to 64 lower-case letters, digits, `-` or `_`, starting with a letter or digit"
            }
            Charset::Address => "1 to 64 letters, digits, `-`, `_`, `.` or `@`",
        }
    }

    fn allows(self, c: char) -> bool {
        match self.charset() {
            Charset::Dotted => c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'),
            Charset::Plain => c.is_ascii_alphanumeric() || matches!(c, '-' | '_'),
            Charset::Slug => c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_'),
            Charset::Address => c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'),
        }
    }

    fn may_start_with(self, c: char) -> bool {
        match self.charset() {
            Charset::Slug => c.is_ascii_lowercase() || c.is_ascii_digit(),
            _ => true,
        }
    }
}

/// A name checked against its kind's rule.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(String);

impl Name {
    /// The name, or why it is not one of `kind`.
    pub fn parse(kind: NameKind, text: &str) -> Result<Name, BadName> {
        let problem = if text.is_empty() {
            Some("it is empty".to_string())
        } else if text.len() > MAX_NAME_LEN {
            Some(format!("it is longer than {MAX_NAME_LEN} characters"))
        } else if let Some(c) = text.chars().find(|&c| !kind.allows(c)) {
            Some(format!("{c:?} is not allowed"))
        } else if !text.starts_with(|c| kind.may_start_with(c)) {
            Some("it must start with a letter or digit".to_string())
        } else {
            None
        };
        match problem {
            Some(problem) => Err(BadName {
                kind,
                name: text.to_string(),
                problem,
            }),
            None => Ok(Name(text.to_string())),
        }
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A text that is not a name of its kind, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadName {
    /// What it was meant to name.
    pub kind: NameKind,
    /// The text as given.
    pub name: String,
    /// What is wrong ("it is empty", "',' is not allowed").
    pub problem: String,
}

impl BadName {
    /// What is wrong and the rule, without the name: for errors that name it already.
    pub fn reason(&self) -> String {
        format!(
            "{}; a {} is {}",
            self.problem,
            self.kind.noun(),
            self.kind.rule()
        )
    }
}

impl fmt::Display for BadName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a {}: {}",
            self.name,
            self.kind.noun(),
            self.reason()
        )
    }
}

impl std::error::Error for BadName {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_takes_its_own_characters() {
        assert!(Name::parse(NameKind::Collection, "notes-2024_a.b").is_ok());
        assert!(Name::parse(NameKind::Pipeline, "default.v2").is_ok());
        assert!(Name::parse(NameKind::Mode, "deep_Search-2").is_ok());
        assert!(Name::parse(NameKind::Mode, "a.b").is_err());
        assert!(Name::parse(NameKind::Function, "knowledge_search").is_ok());
        assert!(Name::parse(NameKind::Key, "ana@example.org").is_ok());
        assert!(Name::parse(NameKind::Collection, "ana@example.org").is_err());
        assert!(Name::parse(NameKind::Tool, "fetch_url-2").is_ok());
        assert!(Name::parse(NameKind::Tool, "Fetch").is_err());
        assert!(Name::parse(NameKind::Tool, "-fetch").is_err());
        assert!(Name::parse(NameKind::Mode, "-fine").is_ok());
    }

    #[test]
    fn a_bad_name_says_what_is_wrong_and_the_rule() {
        let empty = Name::parse(NameKind::Collection, "").unwrap_err();
        assert_eq!(empty.problem, "it is empty");
        let long = Name::parse(NameKind::Pipeline, &"a".repeat(65)).unwrap_err();
        assert_eq!(long.problem, "it is longer than 64 characters");
        assert!(Name::parse(NameKind::Pipeline, &"a".repeat(64)).is_ok());
        let comma = Name::parse(NameKind::Collection, "kb, docs").unwrap_err();
        assert_eq!(
            comma.to_string(),
            "`kb, docs` is not a collection name: ',' is not allowed; a collection name is \
             1 to 64 letters, digits, `-`, `_` or `.`"
        );
        let unicode = Name::parse(NameKind::Conversation, "café").unwrap_err();
        assert_eq!(unicode.problem, "'é' is not allowed");
    }
}
