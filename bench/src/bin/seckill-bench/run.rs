//! One benchmark run's bookkeeping: its raw-output folder, what the machine looked like at
//! the start and the end (load average, cores, commit), the lines it prints (also kept in
//! the folder), and the first line of its result block.

use anyhow::Context;
use chrono::{DateTime, Utc};
use std::{
    fs::{self, File},
    io::Write,
    path::{Path, PathBuf},
    process::Command,
    sync::Mutex,
};

pub struct Run {
    dir: PathBuf,
    started: DateTime<Utc>,
    load_start: String,
    commit: String,
    cores: usize,
    log: Mutex<File>,
}

/// How the run ended, for the first line of the result block.
pub struct Finished {
    at: DateTime<Utc>,
    load_end: String,
}

impl Run {
    /// A fresh folder `$SECKILL_CACHE_DIR/bench/{prefix}{timestamp}` (the cache defaults to
    /// `~/.cache/seckill`, where the project's scripts keep their build).
    pub fn start(root: &Path, prefix: &str) -> anyhow::Result<Self> {
        let cache = std::env::var_os("SECKILL_CACHE_DIR")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache/seckill"))
            })
            .context("neither SECKILL_CACHE_DIR nor HOME is set")?;
        let started = Utc::now();
        let dir = cache
            .join("bench")
            .join(format!("{prefix}{}", started.format("%Y%m%dT%H%M%SZ")));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = File::create(dir.join("output.txt"))?;
        let run = Self {
            started,
            load_start: load_average(),
            commit: commit(root),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            log: Mutex::new(log),
            dir,
        };
        eprintln!("[seckill-bench] results in {}", run.dir.display());
        Ok(run)
    }

    /// A file of the run's folder.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn cores(&self) -> usize {
        self.cores
    }

    /// Prints a line of the run's report and keeps it in `output.txt`.
    pub fn say(&self, line: impl AsRef<str>) {
        let line = line.as_ref();
        println!("{line}");
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(log, "{line}");
    }

    /// What the run is doing, on stderr so stdout stays the report.
    pub fn progress(&self, line: impl AsRef<str>) {
        eprintln!("[seckill-bench] {}", line.as_ref());
    }

    pub fn finish(&self) -> Finished {
        Finished {
            at: Utc::now(),
            load_end: load_average(),
        }
    }

    /// Key facts of the run, as the first lines of `meta.txt`.
    pub fn meta(&self) -> String {
        format!(
            "started_utc={}\nloadavg_start={}\nnproc={}\ncommit={}\n",
            stamp(self.started),
            self.load_start,
            self.cores,
            self.commit
        )
    }

    /// "Run A to B, commit C, N cores, [`profile` build, ]load average X at the start and Y at
    /// the end[, extra]. Raw output: `dir`."
    pub fn header(&self, finished: &Finished, profile: Option<&str>, extra: &str) -> String {
        let profile = profile.map_or(String::new(), |p| format!("`{p}` build, "));
        format!(
            "Run {} to {}, commit {}, {} cores, {profile}load average {} at the start and {} at \
             the end{extra}. Raw output: `{}`.",
            stamp(self.started),
            stamp(finished.at),
            self.commit,
            self.cores,
            self.load_start,
            finished.load_end,
            self.dir.display()
        )
    }
}

impl Finished {
    pub fn meta(&self) -> String {
        format!(
            "loadavg_end={}\nfinished_utc={}\n",
            self.load_end,
            stamp(self.at)
        )
    }
}

fn stamp(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The 1, 5 and 15 minute load averages.
fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|text| text.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// The short commit, `+dirty` when the work tree has changes.
fn commit(root: &Path) -> String {
    let git = |args: &[&str]| Command::new("git").arg("-C").arg(root).args(args).output();
    let Ok(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    if !head.status.success() {
        return "unknown".into();
    }
    let dirty = git(&["diff", "--quiet", "HEAD"]).is_ok_and(|out| !out.status.success());
    format!(
        "{}{}",
        String::from_utf8_lossy(&head.stdout).trim(),
        if dirty { "+dirty" } else { "" }
    )
}

/// `x` with `decimals` places and its whole part grouped by thousands (`1,234.5`).
pub fn grouped(x: f64, decimals: usize) -> String {
    let formatted = format!("{:.*}", decimals, x.abs());
    let (whole, fraction) = formatted
        .split_once('.')
        .map_or((formatted.as_str(), None), |(w, f)| (w, Some(f)));
    let mut out = String::new();
    if x < 0.0 && formatted.chars().any(|c| c.is_ascii_digit() && c != '0') {
        out.push('-');
    }
    for (i, digit) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    if let Some(fraction) = fraction {
        out.push('.');
        out.push_str(fraction);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(1_234_567.891, 0), "1,234,568");
        assert_eq!(grouped(999.5, 2), "999.50");
        assert_eq!(grouped(-1234.0, 1), "-1,234.0");
        assert_eq!(grouped(0.0, 2), "0.00");
    }
}
