//! A real `redis-server` on a free loopback port for the tests that need one. A missing
//! `redis-server` fails the test (CI installs it); it never skips.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::*;

/// A running `redis-server`, killed when dropped.
pub struct Redis {
    pub proc: Option<Proc>,
    pub port: u16,
    dir: PathBuf,
    args: Vec<String>,
}

impl Redis {
    /// Starts one with extra arguments (`--requirepass x`, …).
    pub fn start(extra: &[&str]) -> Redis {
        let mut r = Redis {
            proc: None,
            port: free_port(),
            dir: temp_dir("redis"),
            args: extra.iter().map(|s| s.to_string()).collect(),
        };
        r.restart();
        r
    }

    /// Starts the server again on the same port (after [`Redis::kill`]).
    pub fn restart(&mut self) {
        assert!(self.proc.is_none(), "already running");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", self.dir.to_str().unwrap()])
            .args(&self.args)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "redis-server could not start ({e}); install it: apt-get install redis-server"
                )
            });
        wait_for_port(self.port);
        self.proc = Some(Proc {
            child,
            port: self.port,
        });
    }

    /// Kills the server (SIGKILL: no goodbye to its clients).
    pub fn kill(&mut self) {
        self.proc = None;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            assert!(std::time::Instant::now() < deadline, "redis still up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs one command (with `AUTH password` first when given) and returns the raw reply.
    pub fn command(&self, password: Option<&str>, args: &[&str]) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to redis");
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = Vec::new();
        let mut encode = |args: &[&str]| {
            out.extend(format!("*{}\r\n", args.len()).bytes());
            for a in args {
                out.extend(format!("${}\r\n{a}\r\n", a.len()).bytes());
            }
        };
        if let Some(p) = password {
            encode(&["AUTH", p]);
        }
        encode(args);
        s.write_all(&out).unwrap();
        let mut r = BufReader::new(s);
        if password.is_some() {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            assert!(line.starts_with("+OK"), "AUTH: {line}");
        }
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if let Some(len) = line.strip_prefix('$') {
            let len: i64 = len.trim().parse().unwrap();
            if len < 0 {
                return String::new();
            }
            let mut body = vec![0; len as usize + 2];
            r.read_exact(&mut body).unwrap();
            body.truncate(len as usize);
            return String::from_utf8(body).unwrap();
        }
        line.trim_end().to_string()
    }

    /// Connections named `weir` (what the proxy names its own) open now.
    pub fn weir_connections(&self, password: Option<&str>) -> usize {
        self.command(password, &["CLIENT", "LIST"])
            .lines()
            .filter(|l| l.split(' ').any(|f| f == "name=weir"))
            .count()
    }

    /// The ids of the connections named `weir`, sorted.
    pub fn weir_connection_ids(&self, password: Option<&str>) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .command(password, &["CLIENT", "LIST"])
            .lines()
            .filter(|l| l.split(' ').any(|f| f == "name=weir"))
            .filter_map(|l| {
                l.split(' ')
                    .find_map(|f| f.strip_prefix("id="))?
                    .parse()
                    .ok()
            })
            .collect();
        ids.sort();
        ids
    }

    /// Connections the server accepted since it started.
    pub fn connections_received(&self, password: Option<&str>) -> u64 {
        let info = self.command(password, &["INFO", "stats"]);
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .expect("total_connections_received")
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.proc = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
