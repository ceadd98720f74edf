//! Running the built `shedlock` binary as a user would, and reading what it said.

#![allow(dead_code)] // Each test file uses its own part of this.

use std::io::{Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What one run of the binary left.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Ran {
    /// Everything, for an assertion's message.
    pub fn shown(&self) -> String {
        format!(
            "exit code {:?} after {:?}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.code, self.took, self.stdout, self.stderr
        )
    }

    /// Asserts the exit code and that stderr is the single line `shedlock: ...` (besides
    /// `unlock`'s question), and returns that line.
    pub fn one_line_error(&self, code: i32) -> &str {
        assert_eq!(self.code, Some(code), "{}", self.shown());
        let lines: Vec<&str> = self
            .stderr
            .lines()
            .filter(|line| !line.is_empty() && line.trim_end() != "free this acquisition? [y/N]")
            .collect();
        assert_eq!(lines.len(), 1, "one line on stderr:\n{}", self.shown());
        assert!(
            lines[0].starts_with("shedlock: "),
            "the error line names the program:\n{}",
            self.shown()
        );
        lines[0]
    }
}

/// The binary, with no `SHEDLOCK_URL` from the environment the tests run in.
pub fn shedlock(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_shedlock"));
    command.args(args).env_remove("SHEDLOCK_URL");
    command
}

/// Runs the command to its end with no input.
pub fn run(command: &mut Command) -> Ran {
    run_with_input(command, "")
}

/// Runs the command to its end with `input` on its stdin.
pub fn run_with_input(command: &mut Command, input: &str) -> Ran {
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the shedlock binary starts");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let output: Output = child.wait_with_output().unwrap();
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
        took: started.elapsed(),
    }
}

/// A run still going: its stderr is read as it comes, so a test can wait for a question.
pub struct Running {
    child: Child,
    started: Instant,
    stderr_chunks: mpsc::Receiver<String>,
    stderr_seen: String,
    stdout: JoinHandle<String>,
}

impl Running {
    pub fn start(command: &mut Command) -> Self {
        let started = Instant::now();
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the shedlock binary starts");
        let mut stdout = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            stdout.read_to_string(&mut text).unwrap();
            text
        });
        let mut stderr = child.stderr.take().unwrap();
        let (sender, stderr_chunks) = mpsc::channel();
        std::thread::spawn(move || {
            let mut buffer = [0_u8; 1024];
            while let Ok(read) = stderr.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                let _ = sender.send(String::from_utf8_lossy(&buffer[..read]).into_owned());
            }
        });
        Self {
            child,
            started,
            stderr_chunks,
            stderr_seen: String::new(),
            stdout,
        }
    }

    /// Waits until stderr holds `text`.
    pub fn wait_for_stderr(&mut self, text: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.stderr_seen.contains(text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr_chunks.recv_timeout(left) {
                Ok(chunk) => self.stderr_seen.push_str(&chunk),
                Err(_) => panic!(
                    "{text:?} did not appear on stderr within {within:?}; it said:\n{}",
                    self.stderr_seen
                ),
            }
        }
    }

    /// Types `input` and waits for the end.
    pub fn answer(mut self, input: &str) -> Ran {
        let mut stdin = self.child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        let status = self.child.wait().unwrap();
        while let Ok(chunk) = self.stderr_chunks.recv() {
            self.stderr_seen.push_str(&chunk);
        }
        Ran {
            code: status.code(),
            stdout: self.stdout.join().unwrap(),
            stderr: self.stderr_seen,
            took: self.started.elapsed(),
        }
    }
}
