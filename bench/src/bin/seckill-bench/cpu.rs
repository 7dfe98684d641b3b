//! CPU accounting from `/proc`: the machine's busy ticks and those of the server, Redis,
//! PostgreSQL and RabbitMQ, taken before and after a measurement. PostgreSQL counts its
//! background processes, the backends of the benchmark's database and backends that exited
//! (through the postmaster's child times); live backends of other databases (other people's
//! tests) are left to "other". The load tool's time comes from this process's own
//! children's times, since it is a child that was waited for. The server's memory comes
//! from the same place.

use seckill_bench::machine::MachineTicks;
use serde::Serialize;
use std::{collections::HashMap, fs, ops::Sub};

/// CPU ticks, as `/proc` counts them.
#[derive(Clone, Copy, Default, Serialize)]
pub struct Ticks {
    pub busy: u64,
    pub server: u64,
    pub redis: u64,
    pub postgres: u64,
    pub postgres_other_dbs: u64,
    pub rabbitmq: u64,
    /// User and system time of this process's children that were waited for.
    pub waited_children: u64,
}

/// One process's line of `/proc/{pid}/stat`, reduced.
struct Stat {
    comm: String,
    ppid: u32,
    own: u64,
    children: u64,
}

fn stat(pid: &str) -> Option<Stat> {
    let raw = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: it ends at the last ')'.
    let comm = raw.get(raw.find('(')? + 1..raw.rfind(')')?)?.to_owned();
    let fields: Vec<u64> = raw
        .get(raw.rfind(')')? + 2..)?
        .split(' ')
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    Some(Stat {
        comm,
        ppid: u32::try_from(*fields.first()?).ok()?,
        own: fields.get(10)? + fields.get(11)?,
        children: fields.get(12)? + fields.get(13)?,
    })
}

/// A snapshot now; `server` is the server's pid, when one runs.
pub fn snapshot(server: Option<u32>, bench_db: &str) -> Ticks {
    let mut procs: HashMap<u32, Stat> = HashMap::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let (Ok(pid), Some(stat)) = (name.parse::<u32>(), stat(name)) {
            procs.insert(pid, stat);
        }
    }
    let mut ticks = Ticks {
        busy: MachineTicks::now().busy,
        server: server.and_then(|pid| procs.get(&pid)).map_or(0, |s| s.own),
        waited_children: stat("self").map_or(0, |s| s.children),
        ..Ticks::default()
    };
    let bench_db = format!(" {bench_db} ");
    for (pid, stat) in &procs {
        match stat.comm.as_str() {
            comm if comm.starts_with("redis-server") => ticks.redis += stat.own,
            "beam.smp" => ticks.rabbitmq += stat.own,
            "postgres" => {
                let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
                    .unwrap_or_default();
                // A backend's title: "postgres: user db 127.0.0.1(port) state".
                let backend = cmdline.contains('(') || cmdline.contains("[local]");
                if backend && !cmdline.contains(&bench_db) {
                    ticks.postgres_other_dbs += stat.own;
                } else {
                    ticks.postgres += stat.own;
                }
                // The postmaster's children's times: backends that exited.
                if procs
                    .get(&stat.ppid)
                    .is_none_or(|parent| parent.comm != "postgres")
                {
                    ticks.postgres += stat.children;
                }
            }
            _ => {}
        }
    }
    ticks
}

impl Sub for Ticks {
    type Output = Ticks;

    fn sub(self, before: Ticks) -> Ticks {
        Ticks {
            busy: self.busy.saturating_sub(before.busy),
            server: self.server.saturating_sub(before.server),
            redis: self.redis.saturating_sub(before.redis),
            postgres: self.postgres.saturating_sub(before.postgres),
            postgres_other_dbs: self
                .postgres_other_dbs
                .saturating_sub(before.postgres_other_dbs),
            rabbitmq: self.rabbitmq.saturating_sub(before.rabbitmq),
            waited_children: self.waited_children.saturating_sub(before.waited_children),
        }
    }
}

/// Ticks per second (`getconf CLK_TCK`; 100 on Linux when it cannot be asked).
pub fn ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// A process's resident memory now and at its peak so far (`VmRSS`, `VmHWM` of
/// `/proc/{pid}/status`), in bytes.
#[derive(Clone, Copy, Serialize)]
pub struct Memory {
    pub resident: u64,
    pub peak: u64,
}

pub fn memory(pid: u32) -> Option<Memory> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |field: &str| -> Option<u64> {
        let line = status.lines().find(|line| line.starts_with(field))?;
        line[field.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
    };
    Some(Memory {
        resident: kib("VmRSS:")? * 1024,
        peak: kib("VmHWM:")? * 1024,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_reads_its_own_stat() {
        let me = stat("self").expect("own stat");
        assert!(!me.comm.is_empty());
        assert!(me.ppid > 0);
    }

    #[test]
    fn this_process_reads_its_own_memory() {
        let me = memory(std::process::id()).expect("own status");
        assert!(me.resident > 0);
        assert!(me.peak >= me.resident);
    }
}
