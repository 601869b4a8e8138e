//! For tests: task records, and a real `redis-server` on a free loopback port with a temporary
//! directory of its own, stopped when dropped. Never a system service.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use taskgate_protocol::tasks::TaskStatus;

use crate::{Owner, TaskRecord};

/// Every redis-server this process started and has not stopped, with its directory: killed and
/// removed when the process exits, so one held in a `static` (shared by a test binary's tests,
/// never dropped) leaves neither a process nor a directory behind.
static RUNNING: parking_lot::Mutex<Vec<(u32, PathBuf)>> = parking_lot::Mutex::new(Vec::new());

extern "C" fn kill_running() {
    for (pid, dir) in RUNNING.lock().iter() {
        // SAFETY: kill and waitpid only signal and reap a child this process started.
        unsafe {
            libc::kill(*pid as libc::pid_t, libc::SIGKILL);
            libc::waitpid(*pid as libc::pid_t, std::ptr::null_mut(), 0);
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn track(pid: u32, dir: &std::path::Path) {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    // SAFETY: atexit registers a plain extern "C" function once.
    REGISTERED.call_once(|| unsafe {
        libc::atexit(kill_running);
    });
    RUNNING.lock().push((pid, dir.to_owned()));
}

fn untrack(pid: u32) {
    RUNNING.lock().retain(|(p, _)| *p != pid);
}

/// A running `redis-server`.
pub struct RedisServer {
    child: Option<Child>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// `redis://127.0.0.1:PORT`.
    pub url: String,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts one, with every write fsynced to its append-only file (so a restart keeps
    /// every acknowledged write), and waits until it answers.
    pub fn start() -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let dir = std::env::temp_dir().join(format!("taskgate-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let mut server = RedisServer { child: None, port, url: format!("redis://127.0.0.1:{port}"), dir };
        server.restart();
        server
    }

    /// Stops it abruptly (SIGKILL), as a crash would.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            untrack(child.id());
        }
    }

    /// Starts it again on the same port and data (after [`RedisServer::stop`]).
    pub fn restart(&mut self) {
        self.stop();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string(), "--save", "", "--appendonly", "yes"])
            .args(["--appendfsync", "always", "--protected-mode", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (apt-get install redis-server; .ci/run installs it)");
        track(child.id(), &self.dir);
        self.child = Some(child);
        self.wait_ready();
    }

    /// Waits (bounded) until it answers PING.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.answers() {
                return;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("redis-server exited at start: {status}");
            }
            assert!(Instant::now() < deadline, "redis-server did not answer within 20 s");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn answers(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
        let mut reply = [0u8; 7];
        stream.write_all(b"PING\r\n").is_ok() && stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// An owner of tenant `t` (tests).
pub fn owner(name: &str) -> Owner {
    Owner { tenant: "t".into(), principal: name.into() }
}

/// A working task record (tests).
pub fn record(id: &str, owner: Owner, created: u64, ttl: Option<u64>) -> TaskRecord {
    TaskRecord {
        id: id.into(),
        owner,
        status: TaskStatus::Working,
        status_message: None,
        created_at_ms: created,
        last_updated_at_ms: created,
        ttl_ms: ttl,
        poll_interval_ms: 1000,
        upstream: "u".into(),
        tool: "tool".into(),
        upstream_task_id: None,
        upstream_session: None,
        replica: Some("r1".into()),
        outcome: None,
    }
}

/// A small filesystem of its own (a tmpfs of a few MiB mounted on a temporary directory), for
/// a disk that fills: [`SmallDisk::fill`] takes every free byte, [`SmallDisk::free`] gives
/// them back. Unmounted and removed when dropped. Mounting needs root (as CI runs).
pub struct SmallDisk {
    /// Where it is mounted.
    pub path: PathBuf,
}

impl SmallDisk {
    /// Mounts one of `mib` MiB.
    pub fn mount(mib: u32) -> SmallDisk {
        let path = std::env::temp_dir().join(format!("taskgate-disk-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&path).expect("a temporary directory");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m,mode=0700"), "tmpfs"])
            .arg(&path)
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "mounting a {mib} MiB tmpfs on {} failed: this test fills a small disk of its own and needs root (CI runs as root)",
            path.display()
        );
        SmallDisk { path }
    }

    fn filler(&self) -> PathBuf {
        self.path.join("filler")
    }

    /// Takes every free byte (writes until the disk refuses).
    pub fn fill(&self) {
        let mut file = std::fs::File::create(self.filler()).expect("the filler file");
        let chunk = vec![0x5au8; 64 << 10];
        // Down to the last page: a change of any size then finds no room.
        for size in [chunk.len(), 4096, 1] {
            while file.write_all(&chunk[..size]).is_ok() {}
        }
        let _ = file.sync_all();
    }

    /// Gives back what [`SmallDisk::fill`] took.
    pub fn free(&self) {
        std::fs::remove_file(self.filler()).expect("the filler file is removed");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
