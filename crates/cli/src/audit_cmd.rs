//! `quarry audit`: print the most recent audit records, filtered as the desktop's Audit view
//! filters them.

use anyhow::Result;
use clap::{Args, Subcommand};
use quarry_core::audit::{AuditQuery, AuditSummary, Retention};
use quarry_core::Library;

use crate::output::print_json;
use crate::terminal::printable;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AuditArgs {
    #[command(subcommand)]
    command: Option<AuditCommand>,
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

#[derive(Subcommand)]
enum AuditCommand {
    /// Show, or set, how much of the audit log is kept (older records are deleted)
    Retention {
        /// Keep records this many days (0: whatever their age)
        #[arg(long)]
        days: Option<u32>,
        /// Keep at most this many records, the newest (0: any number)
        #[arg(long)]
        records: Option<u64>,
        #[arg(long)]
        json: bool,
    },
}

pub fn print_audit(library: &Library, args: &AuditArgs) -> Result<()> {
    if let Some(AuditCommand::Retention {
        days,
        records,
        json,
    }) = &args.command
    {
        return retention(library, *days, *records, *json);
    }
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
            "{:>5}  {} UTC  {:<22} {:<12} {:<28} {:>6} ms  {}  {}{}{}",
            r.id,
            utc(r.at_ms),
            printable(&r.principal),
            printable(&r.action),
            printable(&r.target),
            r.duration_ms,
            printable(&r.outcome),
            printable(r.input_hash.get(..19).unwrap_or(&r.input_hash)),
            r.detail
                .map(|d| format!("  ({})", printable(&d)))
                .unwrap_or_default(),
            match r.count {
                1 => String::new(),
                n => format!("  ×{n} within a minute"),
            }
        );
    }
    Ok(())
}

/// `quarry audit retention`: sets what is given (0: no limit), prunes, and shows the log.
fn retention(library: &Library, days: Option<u32>, records: Option<u64>, json: bool) -> Result<()> {
    let mut pruned = 0;
    if days.is_some() || records.is_some() {
        let current = library.audit_summary()?.retention;
        let retention = Retention {
            days: days.map_or(current.days, |d| (d > 0).then_some(d)),
            records: records.map_or(current.records, |n| (n > 0).then_some(n)),
        };
        pruned = library.set_audit_retention(&retention)?;
    }
    let summary = library.audit_summary()?;
    if json {
        return print_json(&summary);
    }
    if pruned > 0 {
        println!("deleted {pruned} records the retention no longer keeps");
    }
    println!("{}", describe(&summary));
    Ok(())
}

/// The audit log's size and retention in one line, as `quarry status` shows it too.
pub fn describe(summary: &AuditSummary) -> String {
    let size = &summary.size;
    let oldest = size
        .oldest_at_ms
        .map(|at| format!(", oldest {} UTC", utc(at)))
        .unwrap_or_default();
    let repeats = match size.events.saturating_sub(size.records) {
        0 => String::new(),
        n => format!(" (and {n} repeats counted on them)"),
    };
    let days = summary
        .retention
        .days
        .map_or("any age".into(), |d| format!("{d} days"));
    let records = summary
        .retention
        .records
        .map_or("any number".into(), |n| format!("{n} records"));
    format!(
        "audit log    {} records{repeats}, about {:.1} MB{oldest}; keeps {days}, at most {records}",
        size.records,
        size.approx_bytes as f64 / 1e6,
    )
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
