//! What the command line prints: progress bars, a rehearsal's report, the findings of a
//! reconciliation, the readiness verdicts and the switch board, each as plain text.

/// Width of the progress bar, in characters between the brackets.
const BAR_WIDTH: i64 = 30;

/// `[#########.....................] 3/10 items`, of `unit`.
pub(super) fn progress_bar(progress: contract::Progress, unit: &str) -> String {
    let filled = if progress.total > 0 {
        (progress.done.clamp(0, progress.total) * BAR_WIDTH / progress.total) as usize
    } else {
        0
    };
    format!(
        "[{}{}] {}/{} {unit}",
        "#".repeat(filled),
        ".".repeat(BAR_WIDTH as usize - filled),
        progress.done,
        progress.total
    )
}

/// The rehearsal's result as text: outcomes by code, latencies, one line per check, the
/// verdict.
pub(super) fn rehearsal_report(rehearsal: &contract::Rehearsal) -> String {
    let mut text = String::new();
    if let Some(result) = &rehearsal.result {
        text.push_str(&format!(
            "requests     {} in {:.2} s, {} unanswered\n",
            result.requests, result.load_s, result.unanswered
        ));
        if let Some(latency) = result.latency_ms {
            text.push_str(&format!(
                "latency ms   p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}\n",
                latency.p50, latency.p90, latency.p99, latency.p999, latency.max
            ));
        }
        text.push_str("outcomes\n");
        for outcome in &result.outcomes {
            text.push_str(&format!(
                "  {} {:<24} {:>9}\n",
                outcome.status, outcome.code, outcome.count
            ));
        }
        text.push_str("checks\n");
        for check in &result.checks {
            let item = check
                .item_id
                .map(|item| format!(" (item {item})"))
                .unwrap_or_default();
            text.push_str(&format!(
                "  {}  {}{item}: {}\n",
                if check.ok { "ok  " } else { "FAIL" },
                check.name.as_str(),
                check.detail
            ));
        }
    }
    let cleaned = if rehearsal.cleaned_up {
        "shadow removed"
    } else {
        "shadow NOT removed"
    };
    text.push_str(&format!(
        "{}: rehearsal {} of activity {} ({cleaned})\n",
        rehearsal.status.as_str().to_uppercase(),
        rehearsal.id,
        rehearsal.activity_id
    ));
    text
}

/// The findings as a terminal table, then one summary line per class (every class, so a
/// script can read the count of any class, zero included).
pub(super) fn findings_table(findings: &[contract::Finding]) -> String {
    use contract::{FindingAction, FindingClass};
    let rows: Vec<[String; 7]> = findings
        .iter()
        .map(|finding| {
            [
                finding.class.as_str().to_owned(),
                finding.item_id.to_string(),
                finding.order_id.clone().unwrap_or_else(|| "-".into()),
                finding.user_id.map_or("-".into(), |user| user.to_string()),
                finding.units.to_string(),
                finding.action.as_str().to_owned(),
                finding.detail.clone(),
            ]
        })
        .collect();
    let header = [
        "class", "item", "order", "user", "units", "action", "detail",
    ]
    .map(String::from);
    let mut widths = header.clone().map(|title| title.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &[String; 7]| {
        let mut text = String::new();
        for (column, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if column == 6 {
                // The detail is last and free text: no padding after it.
                text.push_str(cell);
            } else if matches!(column, 1 | 3 | 4) {
                text.push_str(&format!("{cell:>width$}  "));
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        text.truncate(text.trim_end().len());
        text.push('\n');
        text
    };
    let mut table = String::new();
    if rows.is_empty() {
        table.push_str("no findings\n");
    } else {
        table.push_str(&line(&header));
        for row in &rows {
            table.push_str(&line(row));
        }
    }
    table.push('\n');
    for class in FindingClass::ALL {
        let of_class: Vec<_> = findings.iter().filter(|f| f.class == class).collect();
        let count = |action| of_class.iter().filter(|f| f.action == action).count();
        let units: i64 = of_class.iter().map(|f| f.units).sum();
        table.push_str(&format!(
            "{:<24} {} finding(s), {units} unit(s): {} repaired, {} flagged, {} reported only\n",
            format!("{}:", class.as_str()),
            of_class.len(),
            count(FindingAction::Repaired),
            count(FindingAction::Flagged),
            count(FindingAction::None),
        ));
    }
    table
}

/// One line per check: `ok`/`FAIL`, its name, its detail; then the verdict.
pub(super) fn readiness_table(report: &contract::Readiness) -> String {
    let width = report
        .checks
        .iter()
        .map(|check| check.name.as_str().len())
        .max()
        .unwrap_or(0);
    let mut table = String::new();
    for check in &report.checks {
        let verdict = if check.ok { "ok  " } else { "FAIL" };
        table.push_str(&format!(
            "{verdict}  {:<width$}  {}\n",
            check.name.as_str(),
            check.detail
        ));
    }
    let overall = if report.ready { "READY" } else { "NOT READY" };
    table.push_str(&format!("{overall}: activity {}\n", report.activity_id));
    table
}

/// The board as a terminal table: one line per switch, with how many live instances
/// applied its revision and the slowest of them.
pub(super) fn switch_table(board: &contract::SwitchBoard) -> String {
    let etcd = match (&board.etcd.revision, &board.etcd.error) {
        (Some(revision), _) => format!("etcd revision {revision}"),
        (None, error) => format!(
            "etcd UNREACHABLE ({}); last known values",
            error.as_deref().unwrap_or("?")
        ),
    };
    let mut table = format!(
        "{} ({etcd}, {} live instances)\n{:<30} {:<10} {:<10} {:>9}  applied\n",
        board.prefix,
        board.nodes.len(),
        "path",
        "etcd",
        "default",
        "revision"
    );
    for row in &board.switches {
        let applied = row.applied.iter().filter(|node| node.applied).count();
        let slowest = row
            .applied
            .iter()
            .filter_map(|node| node.took_ms)
            .reduce(f64::max)
            .map(|ms| format!(", slowest {ms:.1} ms"))
            .unwrap_or_default();
        let etcd_value = match (&row.etcd_value, row.valid) {
            (Some(value), true) => value.clone(),
            (Some(value), false) => format!("{value}(!)"),
            (None, _) => "-".into(),
        };
        let revision = row.mod_revision.map_or("-".into(), |r| r.to_string());
        table.push_str(&format!(
            "{:<30} {:<10} {:<10} {:>9}  {applied}/{}{slowest}\n",
            row.path,
            etcd_value,
            row.default_value,
            revision,
            row.applied.len()
        ));
    }
    table
}
