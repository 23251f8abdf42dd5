//! `quarry audit`: print the most recent audit records, filtered as the desktop's Audit view
//! filters them.

use anyhow::Result;
use clap::Args;
use quarry_core::audit::AuditQuery;
use quarry_core::Library;

use crate::output::print_json;

#[derive(Args)]
pub struct AuditArgs {
    /// How many records
    #[arg(long, short = 'n', default_value_t = 50)]
    limit: u32,
    /// Only this principal's records (its label: `administrator`, a key's name, …)
    #[arg(long)]
    principal: Option<String>,
    /// Only this action (`tool.test`, `pipeline.run`, `orchestrator.apply`, `key.create`, …)
    #[arg(long)]
    action: Option<String>,
    /// Only this tool, pipeline or key
    #[arg(long)]
    target: Option<String>,
    /// Only successes or only failures
    #[arg(long, value_parser = ["ok", "error"])]
    outcome: Option<String>,
    #[arg(long)]
    json: bool,
}

pub fn print_audit(library: &Library, args: &AuditArgs) -> Result<()> {
    let records = library.audit(&AuditQuery {
        principal: args.principal.clone(),
        action: args.action.clone(),
        target: args.target.clone(),
        outcome: args.outcome.clone(),
        limit: args.limit,
    })?;
    if args.json {
        return print_json(&records);
    }
    for r in records {
        println!(
            "{:>5}  {} UTC  {:<22} {:<12} {:<28} {:>6} ms  {}  {}{}",
            r.id,
            utc(r.at_ms),
            r.principal,
            r.action,
            r.target,
            r.duration_ms,
            r.outcome,
            &r.input_hash[..19.min(r.input_hash.len())],
            r.detail.map(|d| format!("  ({d})")).unwrap_or_default()
        );
    }
    Ok(())
}

/// `YYYY-MM-DD HH:MM:SS` for Unix milliseconds (UTC), by the civil-from-days algorithm.
fn utc(at_ms: i64) -> String {
    let secs = at_ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_formats_unix_milliseconds() {
        assert_eq!(super::utc(0), "1970-01-01 00:00:00");
        assert_eq!(super::utc(1_796_001_295_860), "2026-11-30 01:14:55");
        assert_eq!(super::utc(951_782_400_000), "2000-02-29 00:00:00");
    }
}
