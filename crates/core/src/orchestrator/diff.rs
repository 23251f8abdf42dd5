//! What a draft changes against an applied revision (`json_diff` over the two
//! configurations as JSON).

use super::OrchestratorConfig;
use crate::json_diff::{diff_json, ConfigChange};

/// Every field that differs from `before` to `after`.
pub fn diff(before: &OrchestratorConfig, after: &OrchestratorConfig) -> Vec<ConfigChange> {
    let as_value = |c: &OrchestratorConfig| serde_json::to_value(c).expect("a config is JSON");
    diff_json(&as_value(before), &as_value(after))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seeded() -> OrchestratorConfig {
        OrchestratorConfig::seed()
    }

    #[test]
    fn the_same_configuration_has_no_changes() {
        assert!(diff(&seeded(), &seeded()).is_empty());
    }

    #[test]
    fn changes_name_the_field_and_the_mode_by_name() {
        let before = seeded();
        let mut after = seeded();
        after.system_prompt = "Answer in one sentence.".into();
        after.modes[0].budget.rounds += 1;
        let mut extra = after.modes[0].clone();
        extra.name = "terse".into();
        after.modes.push(extra);
        after.modes.reverse(); // order alone is not a change
        let first = &before.modes[0].name;
        let changes = diff(&before, &after);
        let paths: Vec<&str> = changes.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                format!("modes[{first}].budget.rounds").as_str(),
                "modes[terse]",
                "system_prompt"
            ],
            "{changes:#?}"
        );
        assert_eq!(changes[1].before, None, "an added mode has nothing before");
        assert_eq!(
            changes[2].after.as_deref(),
            Some("\"Answer in one sentence.\"")
        );
    }
}
