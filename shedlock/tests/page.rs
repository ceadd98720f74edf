//! The HTTP view's page in a real browser: Debian's Chromium, headless, driven through
//! ChromeDriver (WebDriver over HTTP, `SHEDLOCK_TEST_CHROMEDRIVER` and `SHEDLOCK_TEST_CHROMIUM`),
//! reading an axum server on 127.0.0.1 that mounts the view under `/admin/shedlock` in front of
//! PostgreSQL (`SHEDLOCK_TEST_POSTGRES_URL`) and a scheduler on it.
//!
//! What the browser shows is read back from the page (text of cells, an alert's text) and from
//! screenshots of it (the colour a held lock is drawn in), and what a click does is read back
//! from the backend.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};
use shedlock::http::LockRoutes;
use shedlock::postgres::PostgresLockProvider;
use shedlock::scheduler::{Job, LockDefaults, Schedule, Scheduler};
use shedlock::{
    Acquisition, AnyLockProvider, LockAdmin, LockConfiguration, LockHandle, LockProvider, LockState,
};
use shedlock_test_support::settings;
use support::served::{MOUNT, Server, serve};
use support::{bounded, unique};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long the page gets to show what a test waits for: it reads the routes every 5 s.
const SHOWN_WITHIN: Duration = Duration::from_secs(15);
/// The colours the page draws a lock's state in (`tr.held td.state`, `tr.free td.state`).
const HELD_COLOUR: [u8; 3] = [0x8a, 0x3b, 0x00];
const FREE_COLOUR: [u8; 3] = [0x2d, 0x6a, 0x2d];

/// A node on the test database, its holder named, the table made if missing.
async fn node(holder: &str) -> AnyLockProvider {
    let url = settings::POSTGRES.value();
    PostgresLockProvider::builder()
        .create_table_if_missing()
        .connect(url.clone())
        .await
        .unwrap();
    AnyLockProvider::builder()
        .holder(holder)
        .connect(&url)
        .await
        .unwrap()
}

async fn hold(provider: &AnyLockProvider, name: &str) -> Box<dyn LockHandle> {
    let config = LockConfiguration::new(name, Duration::from_secs(600), Duration::ZERO).unwrap();
    match provider.try_lock(&config).await.unwrap() {
        Acquisition::Acquired(handle) => handle,
        Acquisition::NotAcquired(holder) => panic!("{name} is held by {holder:?}"),
    }
}

/// The page's address on `server`.
fn page(server: &Server) -> String {
    format!("http://{}{MOUNT}", server.address)
}

/// One HTTP/1.1 exchange over a new connection: the status, the headers (lower-cased names)
/// and the body.
async fn exchange(
    address: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    // Read up to the end of the answer, which its length says: ChromeDriver keeps the
    // connection open whatever the request asks.
    let mut answer = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    let (split, headers) = loop {
        if let Some(split) = answer.windows(4).position(|window| window == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&answer[..split]).into_owned();
            let headers: Vec<(String, String)> = head
                .lines()
                .skip(1)
                .filter_map(|line| line.split_once(':'))
                .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
                .collect();
            break (split, headers);
        }
        let read = stream.read(&mut buffer).await.unwrap();
        assert!(
            read > 0,
            "the connection closed before the answer's headers"
        );
        answer.extend_from_slice(&buffer[..read]);
    };
    let header = |name: &str| {
        headers
            .iter()
            .find(|(have, _)| have == name)
            .map(|(_, value)| value.clone())
    };
    let chunked = header("transfer-encoding").is_some_and(|value| value.contains("chunked"));
    let length: Option<usize> = header("content-length").map(|value| value.parse().unwrap());
    loop {
        let body = &answer[split + 4..];
        let complete = match length {
            Some(length) => body.len() >= length,
            None if chunked => body.ends_with(b"0\r\n\r\n"),
            None => false,
        };
        if complete {
            break;
        }
        let read = stream.read(&mut buffer).await.unwrap();
        if read == 0 {
            break;
        }
        answer.extend_from_slice(&buffer[..read]);
    }
    let status = String::from_utf8_lossy(&answer[..split])
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let mut body = answer[split + 4..].to_vec();
    if chunked {
        body = dechunked(&body);
    }
    (status, headers, body)
}

fn dechunked(mut chunked: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let line_end = chunked.windows(2).position(|w| w == b"\r\n").unwrap();
        let size_text = String::from_utf8_lossy(&chunked[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap();
        if size == 0 {
            return body;
        }
        let start = line_end + 2;
        body.extend_from_slice(&chunked[start..start + size]);
        chunked = &chunked[start + size + 2..];
    }
}

/// A headless Chromium session, through a ChromeDriver of its own.
struct Browser {
    driver: Child,
    address: String,
    session: String,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the session (and its Chromium) before the driver goes.
        let session = self.session.clone();
        let address = self.address.clone();
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(exchange(
                    &address,
                    "DELETE",
                    &format!("/session/{session}"),
                    None,
                ))
        })
        .join();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Browser {
    async fn start() -> Self {
        let port = {
            let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            free.local_addr().unwrap().port()
        };
        let driver_path = settings::CHROMEDRIVER.value();
        let driver = Command::new(&driver_path)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start ChromeDriver {driver_path}: {e}"));
        let address = format!("127.0.0.1:{port}");
        let started = Instant::now();
        loop {
            if TcpStream::connect(&address).await.is_ok() {
                let (status, _, body) = exchange(&address, "GET", "/status", None).await;
                let ready: Value = serde_json::from_slice(&body).unwrap_or_default();
                if status == 200 && ready["value"]["ready"] == true {
                    break;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "ChromeDriver on {address} not ready in 20 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": settings::CHROMIUM.value(),
                // Root in CI has no sandbox; the shared memory of a container is small.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000",
                         "--force-device-scale-factor=1"],
            },
        }}});
        let mut browser = Self {
            driver,
            address,
            session: String::new(),
        };
        let created = browser
            .command("POST", "/session", Some(capabilities))
            .await;
        browser.session = created["sessionId"].as_str().unwrap().to_owned();
        browser
    }

    /// A WebDriver command; its `value`, or a panic with the driver's error.
    async fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.try_command(method, path, body)
            .await
            .unwrap_or_else(|error| panic!("WebDriver {method} {path}: {error}"))
    }

    async fn try_command(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Value> {
        let path = if path == "/session" {
            path.to_owned()
        } else {
            format!("/session/{}{path}", self.session)
        };
        let body = body.or_else(|| (method == "POST").then(|| json!({})));
        let (status, _, answer) = exchange(&self.address, method, &path, body.as_ref()).await;
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        if status == 200 {
            Ok(answer["value"].clone())
        } else {
            Err(answer["value"].clone())
        }
    }

    async fn open(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })))
            .await;
    }

    /// Runs `script` in the page (`arguments[0]`... are `args`) and returns its value.
    async fn script(&self, script: &str, args: Value) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    /// The text of the element `css` finds, once it is there (`None` until then).
    async fn text_of(&self, css: &str) -> Option<String> {
        let text = self
            .script(
                "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
                json!([css]),
            )
            .await;
        text.as_str().map(str::to_owned)
    }

    /// Waits until the element `css` finds has a text that `wanted` accepts, and returns it.
    async fn wait_for_text(&self, css: &str, wanted: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let text = self.text_of(css).await;
            if let Some(text) = &text
                && wanted(text)
            {
                return text.clone();
            }
            assert!(
                started.elapsed() < SHOWN_WITHIN,
                "{css} shows {text:?} after {SHOWN_WITHIN:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn element(&self, css: &str) -> String {
        let found = self
            .command(
                "POST",
                "/element",
                Some(json!({ "using": "css selector", "value": css })),
            )
            .await;
        found["element-6066-11e4-a52e-4f735466cecf"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    async fn click(&self, css: &str) {
        let element = self.element(css).await;
        self.command("POST", &format!("/element/{element}/click"), None)
            .await;
    }

    /// The text of the dialog the page opened, once it is open.
    async fn dialog_text(&self) -> String {
        let started = Instant::now();
        loop {
            match self.try_command("GET", "/alert/text", None).await {
                Ok(text) => return text.as_str().unwrap().to_owned(),
                Err(_) if started.elapsed() < SHOWN_WITHIN => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("no dialog: {error}"),
            }
        }
    }

    /// The element `css` finds, as its pixels: width, height and RGBA rows.
    async fn screenshot(&self, css: &str) -> (u32, u32, Vec<u8>) {
        let element = self.element(css).await;
        let encoded = self
            .command("GET", &format!("/element/{element}/screenshot"), None)
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().unwrap())
            .unwrap();
        let mut reader = png::Decoder::new(std::io::Cursor::new(png))
            .read_info()
            .unwrap();
        let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
        let frame = reader.next_frame(&mut pixels).unwrap();
        pixels.truncate(frame.buffer_size());
        let rgba: Vec<u8> = match frame.color_type {
            png::ColorType::Rgba => pixels,
            png::ColorType::Rgb => pixels
                .chunks(3)
                .flat_map(|rgb| [rgb[0], rgb[1], rgb[2], 255])
                .collect(),
            other => panic!("a screenshot in {other:?}"),
        };
        (frame.width, frame.height, rgba)
    }
}

/// How many of the pixels are within a small distance of `colour`: text drawn in it.
fn pixels_of(rgba: &[u8], colour: [u8; 3]) -> usize {
    rgba.chunks(4)
        .filter(|pixel| {
            pixel[..3]
                .iter()
                .zip(colour)
                .all(|(have, want)| have.abs_diff(want) <= 12)
        })
        .count()
}

fn row(name: &str) -> String {
    format!("#locks tr[data-lock=\"{}\"]", name.replace('"', "\\\""))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_shows_the_locks_the_backend_holds_and_counts_their_time_down() {
    bounded(async {
        let provider = node("page-node-a").await;
        let name = unique("page-held");
        // A name is whatever a job chose: it is shown as text, never as markup.
        let markup = format!("<img src=x onerror=alert(1)>{}", &unique("")[1..13]);
        let held = hold(&provider, &name).await;
        let _markup_held = hold(&provider, &markup).await;
        let server = serve(LockRoutes::new(provider)).await;
        let browser = Browser::start().await;
        browser.open(&page(&server)).await;

        let holder = browser
            .wait_for_text(&format!("{} td.holder", row(&name)), |text| {
                !text.is_empty()
            })
            .await;
        assert_eq!(holder, "page-node-a");
        assert_eq!(
            browser
                .text_of(&format!("{} td.state", row(&name)))
                .await
                .unwrap(),
            "held"
        );
        let token = held
            .fencing_token()
            .map_or("—".to_owned(), |t| t.to_string());
        assert_eq!(
            browser
                .text_of(&format!("{} td.token", row(&name)))
                .await
                .unwrap(),
            token
        );
        // 600 s held: the time left counts down in the page between reads.
        let left = browser
            .text_of(&format!("{} td.remaining", row(&name)))
            .await
            .unwrap();
        assert!(
            left.starts_with("9 min") || left.starts_with("10 min"),
            "{left}"
        );
        let first = browser
            .script(
                "return Number(document.querySelector(arguments[0]).dataset.ms) - \
                 (performance.now() - readAt);",
                json!([format!("{} td.remaining", row(&name))]),
            )
            .await
            .as_f64()
            .unwrap();
        assert!(first > 590_000.0 && first <= 600_000.0, "{first} ms left");

        assert_eq!(
            browser
                .text_of(&format!("{} td.name", row(&markup)))
                .await
                .as_deref(),
            Some(markup.as_str()),
            "the name is shown as it is"
        );
        assert_eq!(
            browser
                .script(
                    "return document.querySelectorAll('#locks img').length",
                    json!([])
                )
                .await,
            0,
            "no markup from a lock name"
        );
        // Read-only unless the application allows force-unlock: no button.
        assert_eq!(
            browser
                .script(
                    "return document.querySelectorAll('button.free').length",
                    json!([])
                )
                .await,
            0
        );

        // The row as drawn: its state in the held colour, none in the free one.
        let (width, height, pixels) = browser.screenshot(&row(&name)).await;
        assert!(width > 600 && height > 10, "{width}x{height}");
        assert!(
            pixels_of(&pixels, HELD_COLOUR) > 10,
            "no held-coloured text drawn"
        );
        assert_eq!(pixels_of(&pixels, FREE_COLOUR), 0);

        // Released: the next read draws it free.
        assert!(held.unlock().await.unwrap());
        browser
            .wait_for_text(&format!("{} td.state", row(&name)), |text| text == "free")
            .await;
        let (_, _, pixels) = browser.screenshot(&row(&name)).await;
        assert!(
            pixels_of(&pixels, FREE_COLOUR) > 10,
            "no free-coloured text drawn"
        );
        assert_eq!(pixels_of(&pixels, HELD_COLOUR), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn freeing_a_lock_from_the_page_asks_first_and_frees_only_that_acquisition() {
    bounded(async {
        let provider = node("page-node-b").await;
        let name = unique("page-free");
        let held = hold(&provider, &name).await;
        let admin = node("page-operator").await;
        let server = serve(LockRoutes::new(provider).allow_force_unlock(true)).await;
        let browser = Browser::start().await;
        browser.open(&page(&server)).await;
        let button = format!("{} button.free", row(&name));
        browser.wait_for_text(&button, |text| text == "Free…").await;

        // Asked, and declined: nothing changes.
        browser.click(&button).await;
        let question = browser.dialog_text().await;
        assert!(
            question.starts_with(&format!("Free the lock \"{name}\", held by page-node-b")),
            "{question}"
        );
        assert!(question.contains("another node may start it"), "{question}");
        browser.command("POST", "/alert/dismiss", None).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let lock = admin.inspect_lock(&name).await.unwrap().unwrap();
        assert_eq!(lock.state, LockState::Held);

        // Asked, and confirmed: freed, and said so.
        browser.click(&button).await;
        browser.dialog_text().await;
        browser.command("POST", "/alert/accept", None).await;
        let said = browser
            .wait_for_text("#message", |text| !text.is_empty())
            .await;
        assert_eq!(said, format!("Freed the lock \"{name}\"."));
        let lock = admin.inspect_lock(&name).await.unwrap().unwrap();
        assert_eq!(lock.state, LockState::Free);
        assert!(
            !held.unlock().await.unwrap(),
            "the holder hears its lock is gone"
        );
        browser
            .wait_for_text(&format!("{} td.state", row(&name)), |text| text == "free")
            .await;
        assert_eq!(
            browser
                .script(
                    "return document.querySelectorAll(arguments[0]).length",
                    json!([button])
                )
                .await,
            0,
            "a free lock has nothing to free"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_shows_the_schedulers_jobs_with_their_next_run_and_last_outcome() {
    bounded(async {
        let provider = node("page-node-c").await;
        let defaults = LockDefaults::new(Duration::from_secs(30), Duration::ZERO).unwrap();
        let mut scheduler = Scheduler::new(node("page-node-c").await, defaults);
        let failing = unique("page-job-failing");
        let paused = unique("page-job-paused");
        scheduler
            .add(Job::new(
                failing.clone(),
                Schedule::fixed_rate(Duration::from_secs(1)),
                |_run| async { Err::<(), _>("the input file is missing") },
            ))
            .unwrap();
        scheduler
            .add(Job::new(
                paused.clone(),
                Schedule::fixed_rate(Duration::from_secs(3600)),
                |_run| async {},
            ))
            .unwrap();
        let jobs = scheduler.handle();
        jobs.pause(&paused).unwrap();
        let server = serve(LockRoutes::new(provider).jobs(jobs)).await;
        let browser = Browser::start().await;
        browser.open(&page(&server)).await;

        let job_row = |job: &str, column: &str| format!("#jobs tr[data-job=\"{job}\"] td.{column}");
        let outcome = browser
            .wait_for_text(&job_row(&failing, "outcome"), |text| text != "—")
            .await;
        assert_eq!(outcome, "failed: the input file is missing");
        let next = browser
            .wait_for_text(&job_row(&failing, "next-run"), |text| text.starts_with("in "))
            .await;
        assert!(next.contains("T") && next.ends_with("Z)"), "{next}");
        assert_eq!(
            browser.text_of(&job_row(&paused, "status")).await.unwrap(),
            "paused"
        );
        assert_eq!(
            browser.text_of(&job_row(&paused, "next-run")).await.unwrap(),
            "paused"
        );
        assert_eq!(
            browser.text_of(&job_row(&paused, "outcome")).await.unwrap(),
            "—"
        );
        // The JSON the page read, as a script reads it.
        let (status, _, body) = exchange(
            &server.address.to_string(),
            "GET",
            &format!("{MOUNT}/jobs"),
            None,
        )
        .await;
        assert_eq!(status, 200);
        let listed: Value = serde_json::from_slice(&body).unwrap();
        let job = listed["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|job| job["name"] == failing.as_str())
            .unwrap()
            .clone();
        assert_eq!(job["paused"], false);
        assert_eq!(job["last"]["outcome"], "failed");
        assert_eq!(job["last"]["detail"], "the input file is missing");
        assert_eq!(job["last"]["requested"], false);
        assert!(job["next_run"].as_str().unwrap().ends_with('Z'), "{job}");
        let paused_job = listed["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|job| job["name"] == paused.as_str())
            .unwrap()
            .clone();
        assert_eq!(
            paused_job,
            json!({"name": paused, "paused": true, "running": false, "next_run": null, "last": null})
        );
        drop(browser);
        scheduler.shutdown(Duration::from_secs(5)).await;
    })
    .await;
}

#[tokio::test]
async fn the_page_may_run_only_its_own_script_and_read_only_its_own_origin() {
    bounded(async {
        let server = serve(LockRoutes::new(shedlock::memory::MemoryLockProvider::new())).await;
        let (status, headers, body) =
            exchange(&server.address.to_string(), "GET", MOUNT, None).await;
        assert_eq!(status, 200);
        let header = |name: &str| {
            headers
                .iter()
                .find(|(have, _)| have == name)
                .map(|(_, value)| value.as_str())
                .unwrap_or_else(|| panic!("no {name} header: {headers:?}"))
        };
        assert_eq!(header("content-type"), "text/html; charset=utf-8");
        let policy = header("content-security-policy");
        for rule in [
            "default-src 'none'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "form-action 'none'",
        ] {
            assert!(policy.contains(rule), "{policy}");
        }
        assert_eq!(header("x-frame-options"), "DENY");
        assert_eq!(header("x-content-type-options"), "nosniff");
        let page = String::from_utf8(body).unwrap();
        assert!(
            page.contains(r#"data-force-unlock="false" data-jobs="false""#),
            "the page says what it offers"
        );
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "no external asset"
        );
    })
    .await;
}
