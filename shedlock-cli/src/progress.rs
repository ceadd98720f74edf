//! A one-line spinner on stderr for anything that takes more than a second, so a slow backend
//! looks busy rather than hung. Only on a terminal: piped stderr stays clean for scripts.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Shorter waits show nothing: a progress line that flashes by is noise.
const SHOW_AFTER: Duration = Duration::from_secs(1);
const FRAME_EVERY: Duration = Duration::from_millis(120);
const FRAMES: [char; 4] = ['|', '/', '-', '\\'];

struct Line {
    message: String,
    /// Whether the terminal shows the line now, so clearing it is needed before other output.
    drawn: bool,
}

struct Shared {
    line: Mutex<Line>,
    done: AtomicBool,
}

/// A running spinner; dropping it clears the line.
pub struct Progress {
    shared: Option<Arc<Shared>>,
    drawer: Option<JoinHandle<()>>,
}

impl Progress {
    /// Shows `message` with a spinner once a second has passed, if stderr is a terminal.
    pub fn start(message: impl Into<String>) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self {
                shared: None,
                drawer: None,
            };
        }
        let shared = Arc::new(Shared {
            line: Mutex::new(Line {
                message: message.into(),
                drawn: false,
            }),
            done: AtomicBool::new(false),
        });
        let drawer = {
            let shared = shared.clone();
            std::thread::spawn(move || draw_until_done(&shared))
        };
        Self {
            shared: Some(shared),
            drawer: Some(drawer),
        }
    }

    /// Replaces the text, for a count that grows.
    pub fn set(&self, message: impl Into<String>) {
        if let Some(shared) = &self.shared {
            shared
                .line
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .message = message.into();
        }
    }

    /// Runs `write` with the line cleared, so other output never lands in the middle of it;
    /// the spinner comes back at its next frame.
    pub fn suspend<R>(&self, write: impl FnOnce() -> R) -> R {
        let Some(shared) = &self.shared else {
            return write();
        };
        let mut line = shared.line.lock().unwrap_or_else(PoisonError::into_inner);
        clear(&mut line);
        write()
    }

    /// Stops the spinner and clears its line.
    pub fn finish(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(shared) = self.shared.take() {
            shared.done.store(true, Ordering::Release);
            if let Some(drawer) = self.drawer.take() {
                drawer.thread().unpark();
                let _ = drawer.join();
            }
            clear(&mut shared.line.lock().unwrap_or_else(PoisonError::into_inner));
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop();
    }
}

fn clear(line: &mut Line) {
    if line.drawn {
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "\r\x1b[2K");
        let _ = stderr.flush();
        line.drawn = false;
    }
}

fn draw_until_done(shared: &Shared) {
    let started = Instant::now();
    while started.elapsed() < SHOW_AFTER {
        if shared.done.load(Ordering::Acquire) {
            return;
        }
        std::thread::park_timeout(SHOW_AFTER.saturating_sub(started.elapsed()));
    }
    for frame in FRAMES.iter().cycle() {
        if shared.done.load(Ordering::Acquire) {
            return;
        }
        {
            let mut line = shared.line.lock().unwrap_or_else(PoisonError::into_inner);
            let mut stderr = std::io::stderr().lock();
            let _ = write!(
                stderr,
                "\r\x1b[2K{frame} {} ({}s)",
                line.message,
                started.elapsed().as_secs()
            );
            let _ = stderr.flush();
            line.drawn = true;
        }
        std::thread::park_timeout(FRAME_EVERY);
    }
}
