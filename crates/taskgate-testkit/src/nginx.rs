//! [`Nginx`]: Debian's nginx as a round-robin load balancer in front of gateway replicas, on a
//! free loopback port with a directory of its own, stopped when dropped.
//!
//! It runs as a daemon: `nginx` binds its port and then returns, so the test waits for the
//! command to exit, never for time to pass.

use std::path::Path;

/// A running nginx.
pub struct Nginx {
    /// Its MCP endpoint (`http://127.0.0.1:PORT/mcp`).
    pub url: String,
    /// Its master process.
    pid: i32,
    _dir: tempfile::TempDir,
}

impl Nginx {
    /// nginx in front of `backends` (`host:port` each), round robin, no affinity: each request
    /// goes to the next backend whatever its session. Streams pass unbuffered.
    pub fn round_robin(backends: &[String]) -> Nginx {
        let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("nginx is installed (Debian package nginx; .ci/run installs it)");
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let servers: String = backends.iter().map(|b| format!("    server {b} max_fails=0;\n")).collect();
        let root = dir.path().display();
        let conf = format!(
            "worker_processes 1;\nerror_log {root}/logs/error.log;\npid {root}/nginx.pid;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log {root}/logs/access.log;\n  client_body_temp_path {root};\n  proxy_temp_path {root};\n  \
             fastcgi_temp_path {root};\n  uwsgi_temp_path {root};\n  scgi_temp_path {root};\n  \
             upstream replicas {{\n{servers}    keepalive 16;\n  }}\n  \
             server {{\n    listen 127.0.0.1:{port};\n    location / {{\n      proxy_pass http://replicas;\n      \
             proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      proxy_buffering off;\n      \
             proxy_request_buffering off;\n      proxy_read_timeout 1h;\n      \
             proxy_next_upstream error timeout;\n    }}\n  }}\n}}\n"
        );
        let file = dir.path().join("nginx.conf");
        std::fs::write(&file, conf).unwrap();
        let status = std::process::Command::new(nginx)
            .arg("-c")
            .arg(&file)
            .arg("-p")
            .arg(dir.path())
            .status()
            .expect("nginx starts");
        assert!(
            status.success(),
            "nginx did not start: {}",
            std::fs::read_to_string(dir.path().join("logs/error.log")).unwrap_or_default()
        );
        let pid: i32 = std::fs::read_to_string(dir.path().join("nginx.pid")).unwrap().trim().parse().unwrap();
        Nginx { url: format!("http://127.0.0.1:{port}/mcp"), pid, _dir: dir }
    }

    /// The backends' statuses as nginx logged each request (its access log), in order.
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("logs/access.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM: a fast shutdown of the master and its worker.
        unsafe {
            libc::kill(self.pid, libc::SIGTERM);
        }
    }
}
