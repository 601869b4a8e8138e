//! The standard `process_*` metrics of a Prometheus client (CPU, memory, file descriptors,
//! threads, start time), read from `/proc/self` at each scrape. Names, types and units are those
//! of the Prometheus client libraries, so the usual dashboards and alerts work unchanged. On a
//! system without `/proc` the collector exports nothing.

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, IntGauge, Opts};

/// The `process_*` metrics.
pub struct ProcessCollector {
    cpu: Counter,
    /// One scrape at a time reads and adds to `cpu` (two listeners may be scraped at once).
    adding: parking_lot::Mutex<()>,
    open_fds: IntGauge,
    max_fds: IntGauge,
    virtual_memory: IntGauge,
    resident_memory: IntGauge,
    start_time: Gauge,
    threads: IntGauge,
    descs: Vec<Desc>,
}

/// What `/proc/self/stat` says of the process.
#[derive(Debug, PartialEq)]
struct Stat {
    /// User and system CPU time, in clock ticks.
    cpu_ticks: u64,
    threads: i64,
    /// Start time after boot, in clock ticks.
    start_ticks: u64,
    virtual_bytes: i64,
    resident_pages: i64,
}

impl ProcessCollector {
    pub fn new() -> ProcessCollector {
        let cpu = Counter::with_opts(Opts::new(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
        ))
        .expect("valid counter");
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("valid gauge");
        let open_fds = gauge("process_open_fds", "Number of open file descriptors.");
        let max_fds = gauge("process_max_fds", "Maximum number of open file descriptors.");
        let virtual_memory = gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.");
        let resident_memory = gauge("process_resident_memory_bytes", "Resident memory size in bytes.");
        let threads = gauge("process_threads", "Number of OS threads in the process.");
        let start_time =
            Gauge::new("process_start_time_seconds", "Start time of the process since unix epoch in seconds.")
                .expect("valid gauge");
        let mut descs = Vec::new();
        descs.extend(cpu.desc().into_iter().cloned());
        for g in [&open_fds, &max_fds, &virtual_memory, &resident_memory, &threads] {
            descs.extend(g.desc().into_iter().cloned());
        }
        descs.extend(start_time.desc().into_iter().cloned());
        ProcessCollector {
            cpu,
            adding: parking_lot::Mutex::new(()),
            open_fds,
            max_fds,
            virtual_memory,
            resident_memory,
            start_time,
            threads,
            descs,
        }
    }

    /// The names it exports.
    pub fn names() -> [&'static str; 7] {
        [
            "process_cpu_seconds_total",
            "process_open_fds",
            "process_max_fds",
            "process_virtual_memory_bytes",
            "process_resident_memory_bytes",
            "process_start_time_seconds",
            "process_threads",
        ]
    }
}

impl Default for ProcessCollector {
    fn default() -> Self {
        ProcessCollector::new()
    }
}

/// Parses `/proc/<pid>/stat` (proc(5)): the fields after the command name, which is in
/// parentheses and may itself hold spaces and parentheses.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name; proc(5) numbers fields from 1.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    Some(Stat {
        cpu_ticks: field(14)? + field(15)?,
        threads: field(20)? as i64,
        start_ticks: field(22)?,
        virtual_bytes: field(23)? as i64,
        resident_pages: field(24)? as i64,
    })
}

/// The boot time in seconds since the epoch (`btime` in `/proc/stat`).
fn boot_time() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    text.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

fn sysconf(name: libc::c_int) -> Option<u64> {
    // SAFETY: sysconf reads a system constant; it has no preconditions.
    let value = unsafe { libc::sysconf(name) };
    (value > 0).then_some(value as u64)
}

fn max_fds() -> Option<i64> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into memory we own.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    ok.then_some(limit.rlim_cur.min(i64::MAX as libc::rlim_t) as i64)
}

impl Collector for ProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(stat) = std::fs::read_to_string("/proc/self/stat").ok().as_deref().and_then(parse_stat) else {
            return Vec::new();
        };
        let ticks = sysconf(libc::_SC_CLK_TCK).unwrap_or(100) as f64;
        let page = sysconf(libc::_SC_PAGESIZE).unwrap_or(4096) as i64;
        // The counter only goes up: add what was spent since the last scrape.
        let cpu = stat.cpu_ticks as f64 / ticks;
        {
            let _one = self.adding.lock();
            let past = self.cpu.get();
            if cpu > past {
                self.cpu.inc_by(cpu - past);
            }
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds.set(fds.count() as i64);
        }
        if let Some(max) = max_fds() {
            self.max_fds.set(max);
        }
        self.virtual_memory.set(stat.virtual_bytes);
        self.resident_memory.set(stat.resident_pages * page);
        self.threads.set(stat.threads);
        if let Some(boot) = boot_time() {
            self.start_time.set(boot as f64 + stat.start_ticks as f64 / ticks);
        }
        let mut families = self.cpu.collect();
        for g in [&self.open_fds, &self.max_fds, &self.virtual_memory, &self.resident_memory, &self.threads] {
            families.extend(g.collect());
        }
        families.extend(self.start_time.collect());
        families
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_name_with_spaces_and_parentheses_is_skipped() {
        let line = "4242 (taskgate (x) y) S 1 4242 4242 0 -1 4194560 2000 0 0 0 150 50 0 0 20 0 9 0 12345 \
                    987654321 2500 18446744073709551615 1 1 0 0 0 0 0 4096 17920 0 0 0 17 1 0 0 0 0 0";
        let stat = parse_stat(line).unwrap();
        assert_eq!(
            stat,
            Stat { cpu_ticks: 200, threads: 9, start_ticks: 12345, virtual_bytes: 987_654_321, resident_pages: 2500 }
        );
    }

    #[test]
    fn this_process_is_read() {
        let families = ProcessCollector::new().collect();
        let names: Vec<&str> = families.iter().map(|f| f.name()).collect();
        assert_eq!(names.len(), 7, "{names:?}");
        let rss = families.iter().find(|f| f.name() == "process_resident_memory_bytes").unwrap();
        assert!(rss.get_metric()[0].get_gauge().get_value() > 1e6);
        let fds = families.iter().find(|f| f.name() == "process_open_fds").unwrap();
        assert!(fds.get_metric()[0].get_gauge().get_value() >= 3.0);
    }
}
