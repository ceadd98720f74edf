//! The locks over HTTP, as JSON: an [axum] 0.8 router to mount in an application's admin
//! server, so an operator sees the locks (and frees a stuck one) with `curl` and a browser
//! instead of the backend's own client and key layout.
//!
//! [`LockRoutes`] serves any [`LockAdmin`], usually the provider the application already holds
//! ([`connect`](crate::connect)'s [`AnyLockProvider`](crate::AnyLockProvider) is one):
//!
//! | request | answer |
//! |---|---|
//! | `GET /` | a page for operators (HTML, no external assets): the locks with holder, time left counting down and fencing token, a button to free one when force-unlock is allowed, and the scheduler's jobs when given ([`LockRoutes::jobs`]) |
//! | `GET /jobs` | `200 {"jobs": [`[`JobJson`](crate::json::JobJson)`, ...]}`: the jobs of the scheduler given to [`LockRoutes::jobs`], in name order; only then |
//! | `GET /locks?prefix=&after=&limit=` | `200` [`LockPageJson`]: a page of the locks whose names start with `prefix` |
//! | `GET /locks/{name}` | `200` [`LockJson`], or `404 {"error": "no lock named ..."}` |
//! | `POST /locks/{name}/unlock` with `{"acquisition": "..."}` | `200 {"freed": true}`, or `409 {"freed": false, "error": ...}`; only with [`LockRoutes::allow_force_unlock`] |
//!
//! Listing is paged so a backend with 100,000 locks is never read at once: `limit` is 1 to
//! [`MAX_PAGE_SIZE`] ([`DEFAULT_PAGE_SIZE`] when left out), and while a page's `next` is not
//! `null` it goes back, URL-encoded, as `after=` for the page that follows. A page may hold
//! fewer locks than `limit` (even none) and still have a `next`.
//!
//! A lock's name is one path segment, percent-encoded: `/` as `%2F`, a space as `%20`, `%` as
//! `%25`. The name is decoded exactly once, so every name the backend stores can be asked for.
//!
//! Force-unlock frees a lock only if the acquisition the operator saw (the `acquisition` field
//! of the listing) still holds it: a lock that changed hands since is left alone and the answer
//! is `409`. It is off unless the application turns it on, and off it is absent from the router
//! altogether, so `POST .../unlock` is answered `404 Not Found` (by the application's fallback,
//! as any path it does not serve). Its body must be sent as `Content-Type: application/json`
//! (otherwise `415`), which a cross-site HTML form cannot do.
//!
//! Every error these routes answer is JSON, `{"error": "..."}`: `400` for a bad query, path or
//! body and for a name the provider refuses (naming the parameter or the rule; a body that is
//! JSON of another shape is `422`, as axum answers it); by the error's kind
//! ([`ErrorKind`]), `502` when the backend failed, refused this server's
//! credentials or holds data the provider cannot read, `503` when it could not be reached (a
//! client may retry), `504` when it did not answer in time (the outcome of a force-unlock is
//! then unknown: list again), `501` when the provider does not offer the operation, `500` when
//! this server's own setup is wrong (a missing lock table). The messages are the providers' own, which never show a credential.
//!
//! The page reads the JSON routes beside it and writes what they hold as text, never as markup,
//! so a lock name cannot inject anything into it. It is served with a content security policy
//! that lets it load nothing from elsewhere, post no form, and be framed by no site (so its
//! button cannot be clicked through another page). Freeing a lock asks the operator to confirm
//! first.
//!
//! The router checks no identity: mount it where the application's admin endpoints are, behind
//! their authentication, as here under `/admin/shedlock`:
//!
//! ```no_run
//! use std::sync::Arc;
//! use axum::Router;
//! use shedlock::http::LockRoutes;
//! use shedlock::LockingTaskExecutor;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let provider = Arc::new(shedlock::connect("postgres://app@db/app").await?);
//! // The jobs and the admin view share one provider, so one pool.
//! let executor = LockingTaskExecutor::new(provider.clone());
//! let admin = Router::new().nest(
//!     "/admin/shedlock",
//!     LockRoutes::new(provider).allow_force_unlock(true).into_router(),
//! );
//! // GET /admin/shedlock/locks?prefix=report-&limit=100
//! // GET /admin/shedlock/locks/report%2Fdaily
//! // POST /admin/shedlock/locks/report%2Fdaily/unlock {"acquisition": "..."}
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9090").await?;
//! axum::serve(listener, admin).await?;
//! # drop(executor);
//! # Ok(()) }
//! ```

use std::sync::Arc;

use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use shedlock_core::{
    AcquisitionId, DEFAULT_PAGE_SIZE, ErrorKind, LockAdmin, LockError, PageCursor, PageRequest,
};

use crate::json::{LockJson, LockPageJson};

/// The largest `limit` a listing accepts: one request stays one bounded read of the backend and
/// one bounded response, however many locks there are.
pub const MAX_PAGE_SIZE: usize = 1000;

/// The routes of the HTTP view, read-only unless [`allow_force_unlock`](Self::allow_force_unlock)
/// says otherwise. See the [module docs](self) for the requests and answers.
#[derive(Debug)]
pub struct LockRoutes {
    admin: Arc<dyn LockAdmin>,
    force_unlock: bool,
    #[cfg(feature = "scheduler")]
    jobs: Option<crate::scheduler::SchedulerHandle>,
}

impl LockRoutes {
    /// The routes over `admin`: the provider itself, or an `Arc` of it shared with the
    /// executor.
    pub fn new(admin: impl LockAdmin + 'static) -> Self {
        Self {
            admin: Arc::new(admin),
            force_unlock: false,
            #[cfg(feature = "scheduler")]
            jobs: None,
        }
    }

    /// Serves `GET /jobs` and shows the jobs on the page: each job of the scheduler `jobs` is a
    /// handle of ([`Scheduler::handle`](crate::scheduler::Scheduler::handle)), with its status,
    /// next run and last outcome on this node.
    #[cfg(feature = "scheduler")]
    #[cfg_attr(docsrs, doc(cfg(feature = "scheduler")))]
    pub fn jobs(mut self, jobs: crate::scheduler::SchedulerHandle) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// Serves `POST /locks/{name}/unlock` when `allow` is true. Off by default: freeing a lock
    /// is an operator's power, and an application that shows its locks does not grant it by
    /// accident.
    pub fn allow_force_unlock(mut self, allow: bool) -> Self {
        self.force_unlock = allow;
        self
    }

    /// The router, for `Router::nest` or `Router::merge` into the application's own, whatever
    /// state that one has.
    pub fn into_router<S>(self) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        #[cfg(feature = "scheduler")]
        let with_jobs = self.jobs.is_some();
        #[cfg(not(feature = "scheduler"))]
        let with_jobs = false;
        let page: Arc<str> = PAGE
            .replace("{force_unlock}", &self.force_unlock.to_string())
            .replace("{jobs}", &with_jobs.to_string())
            .into();
        let mut router = Router::new()
            .route("/", get(move || std::future::ready(page_response(&page))))
            .route("/locks", get(list))
            .route("/locks/{name}", get(inspect));
        if self.force_unlock {
            router = router.route("/locks/{name}/unlock", post(force_unlock));
        }
        #[cfg(feature = "scheduler")]
        if let Some(jobs) = self.jobs {
            router = router.route(
                "/jobs",
                get(move || {
                    let listed: Vec<crate::json::JobJson> =
                        jobs.jobs().iter().map(crate::json::JobJson::from).collect();
                    std::future::ready(Json(json!({ "jobs": listed })))
                }),
            );
        }
        router.with_state(self.admin)
    }
}

/// The operators' page; `{force_unlock}` and `{jobs}` say what it offers.
const PAGE: &str = include_str!("page.html");

/// The page with headers that let it run its own script and read the routes beside it, and
/// nothing else: no resource from elsewhere, no form, no framing by another site.
fn page_response(page: &str) -> Response {
    (
        [
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            ),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        Html(page.to_owned()),
    )
        .into_response()
}

type Admin = State<Arc<dyn LockAdmin>>;

async fn list(
    State(admin): Admin,
    RawQuery(query): RawQuery,
) -> Result<Json<LockPageJson>, ApiError> {
    let parameters = query_parameters(query.as_deref().unwrap_or_default())?;
    let request = page_request(&parameters)?;
    let page = admin.list_locks(&request).await?;
    Ok(Json(LockPageJson::from(&page)))
}

async fn inspect(
    State(admin): Admin,
    name: Result<Path<String>, PathRejection>,
) -> Result<Json<LockJson>, ApiError> {
    let name = lock_name(name)?;
    match admin.inspect_lock(&name).await? {
        Some(lock) => Ok(Json(LockJson::from(&lock))),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no lock named {name:?}"),
        )),
    }
}

/// What an operator sends to free a lock: the acquisition a listing or an inspect showed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UnlockBody {
    acquisition: String,
}

async fn force_unlock(
    State(admin): Admin,
    name: Result<Path<String>, PathRejection>,
    body: Result<Json<UnlockBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let name = lock_name(name)?;
    let Json(body) = body.map_err(|rejection| {
        ApiError::new(
            rejection.status(),
            format!(
                "the body must be JSON {{\"acquisition\": \"...\"}} with the acquisition a \
                 listing showed, sent as Content-Type: application/json: {}",
                rejection.body_text()
            ),
        )
    })?;
    if body.acquisition.is_empty() {
        return Err(ApiError::bad_request(
            "acquisition must not be empty: pass the acquisition a listing showed".to_owned(),
        ));
    }
    let acquisition = AcquisitionId::new(body.acquisition);
    if admin.force_unlock(&name, &acquisition).await? {
        Ok(Json(json!({ "freed": true })).into_response())
    } else {
        let error = format!(
            "lock {name:?} was not freed: acquisition {:?} no longer holds it (it changed hands \
             or is already free); nothing was changed",
            acquisition.as_str()
        );
        Ok((
            StatusCode::CONFLICT,
            Json(json!({ "freed": false, "error": error })),
        )
            .into_response())
    }
}

fn lock_name(path: Result<Path<String>, PathRejection>) -> Result<String, ApiError> {
    match path {
        Ok(Path(name)) => Ok(name),
        Err(rejection) => Err(ApiError::bad_request(format!(
            "the lock name in the path cannot be read (percent-encode it as one UTF-8 path \
             segment): {}",
            rejection.body_text()
        ))),
    }
}

/// The `key=value` pairs of a query string, decoded as a form is (`+` is a space, `%XX` a byte)
/// but strictly: a parameter whose bytes are not UTF-8 once decoded is refused, as the same
/// bytes in the path are, instead of reaching the provider with U+FFFD in their place (a
/// prefix or a cursor that is not the one the client sent).
fn query_parameters(query: &str) -> Result<Vec<(String, String)>, ApiError> {
    let decode = |text: &str, what: &dyn Fn() -> String| {
        let bytes = text.as_bytes();
        let mut decoded = Vec::with_capacity(bytes.len());
        let mut at = 0;
        while at < bytes.len() {
            let escaped = match bytes[at] {
                b'%' => bytes
                    .get(at + 1..at + 3)
                    .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
                    .and_then(|hex| std::str::from_utf8(hex).ok())
                    .and_then(|hex| u8::from_str_radix(hex, 16).ok()),
                _ => None,
            };
            match (bytes[at], escaped) {
                (_, Some(byte)) => {
                    decoded.push(byte);
                    at += 3;
                }
                (b'+', None) => {
                    decoded.push(b' ');
                    at += 1;
                }
                (byte, None) => {
                    decoded.push(byte);
                    at += 1;
                }
            }
        }
        String::from_utf8(decoded).map_err(|_| {
            ApiError::bad_request(format!(
                "{} is not UTF-8 once percent-decoded: percent-encode the UTF-8 bytes of the \
                 text (a page cursor goes back exactly as a page's next gave it)",
                what()
            ))
        })
    };
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(key, &|| format!("a query parameter's name ({key:?})"))?;
            let value = decode(value, &|| format!("query parameter {key:?}"))?;
            Ok((key, value))
        })
        .collect()
}

/// The page a query string asks for. Each parameter at most once and no other, so a misspelt
/// `perfix=` is refused rather than listing every lock.
fn page_request(parameters: &[(String, String)]) -> Result<PageRequest, ApiError> {
    let mut prefix = None;
    let mut after = None;
    let mut limit = None;
    for (key, value) in parameters {
        let slot = match key.as_str() {
            "prefix" => &mut prefix,
            "after" => &mut after,
            "limit" => &mut limit,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter {key:?}: a listing reads prefix, after and limit"
                )));
            }
        };
        if slot.replace(value.as_str()).is_some() {
            return Err(ApiError::bad_request(format!(
                "query parameter {key:?} is given more than once: give it at most once"
            )));
        }
    }
    let limit = match limit {
        None => DEFAULT_PAGE_SIZE,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|limit| (1..=MAX_PAGE_SIZE).contains(limit))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "query parameter \"limit\" must be a whole number from 1 to {MAX_PAGE_SIZE}, \
                     not {text:?}"
                ))
            })?,
    };
    let after = match after {
        None => None,
        Some("") => {
            return Err(ApiError::bad_request(
                "query parameter \"after\" must not be empty: pass the previous page's next, or \
                 leave it out for the first page"
                    .to_owned(),
            ));
        }
        Some(cursor) => Some(PageCursor::new(cursor)),
    };
    Ok(PageRequest {
        after,
        ..PageRequest::first(prefix.unwrap_or_default()).with_limit(limit)
    })
}

/// An answer other than success: its status and `{"error": message}`.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: String) -> Self {
        Self { status, message }
    }

    fn bad_request(message: String) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<LockError> for ApiError {
    fn from(error: LockError) -> Self {
        Self::new(status_of(&error), error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(json!({ "error": self.message }))).into_response()
    }
}

/// The status that tells a client whose fault an error is, by its kind: the request's (4xx),
/// the backend's behind this server (5xx, as a gateway reports its upstream: 503 when it could
/// not be reached, so a client may retry; 504 when it did not answer in time; 502 when it
/// answered with a failure), or this server's own setup (500).
fn status_of(error: &LockError) -> StatusCode {
    if let LockError::Timeout { .. } = error {
        return StatusCode::GATEWAY_TIMEOUT;
    }
    match error.kind() {
        // Refused before anything reached the backend: the request's own fault.
        ErrorKind::InvalidRequest => StatusCode::BAD_REQUEST,
        ErrorKind::Unreachable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::OutcomeUnknown
        | ErrorKind::CredentialsRefused
        | ErrorKind::CorruptData
        | ErrorKind::Limit => StatusCode::BAD_GATEWAY,
        ErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use shedlock_core::Operation;

    use super::*;

    fn bad_query(pairs: &[(&str, &str)]) -> String {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect();
        let error = page_request(&pairs).unwrap_err();
        assert_eq!(error.status, StatusCode::BAD_REQUEST, "{}", error.message);
        error.message
    }

    #[test]
    fn a_query_reads_prefix_cursor_and_limit() {
        let pairs = [
            ("prefix".to_owned(), "report-".to_owned()),
            ("after".to_owned(), "report-3".to_owned()),
            ("limit".to_owned(), "1000".to_owned()),
        ];
        let request = page_request(&pairs).unwrap();
        assert_eq!(request.prefix, "report-");
        assert_eq!(request.after, Some(PageCursor::new("report-3")));
        assert_eq!(request.limit, MAX_PAGE_SIZE);
        let request = page_request(&[]).unwrap();
        assert_eq!(request, PageRequest::first(""));
    }

    #[test]
    fn a_query_string_decodes_as_a_form_but_only_to_utf8() {
        let pairs = query_parameters("prefix=a+b%2Fc%C3%A9&&after=%zz%2&limit").unwrap();
        let expected = [("prefix", "a b/cé"), ("after", "%zz%2"), ("limit", "")];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect();
        assert_eq!(pairs, expected);
        assert_eq!(query_parameters("").unwrap(), []);
        assert_eq!(
            query_parameters("after=%-1").unwrap()[0].1,
            "%-1",
            "a sign is not a hex digit"
        );
        for (query, named) in [
            ("after=%FF", "query parameter \"after\""),
            ("prefix=x%C3", "query parameter \"prefix\""),
            ("%FE=1", "a query parameter's name (\"%FE\")"),
        ] {
            let error = query_parameters(query).unwrap_err();
            assert_eq!(error.status, StatusCode::BAD_REQUEST, "{query}");
            assert!(
                error
                    .message
                    .starts_with(&format!("{named} is not UTF-8 once percent-decoded")),
                "{query}: {}",
                error.message
            );
        }
    }

    #[test]
    fn a_bad_query_names_the_parameter_and_its_rule() {
        for limit in ["0", "1001", "-1", "ten", ""] {
            let message = bad_query(&[("limit", limit)]);
            assert!(
                message.contains("\"limit\" must be a whole number from 1 to 1000"),
                "{message}"
            );
        }
        assert!(bad_query(&[("after", "")]).contains("\"after\" must not be empty"));
        let message = bad_query(&[("perfix", "report")]);
        assert!(
            message.contains("unknown query parameter \"perfix\""),
            "{message}"
        );
        let message = bad_query(&[("prefix", "a"), ("prefix", "b")]);
        assert!(
            message.contains("\"prefix\" is given more than once"),
            "{message}"
        );
    }

    #[test]
    fn backend_errors_are_gateway_errors_and_a_refused_name_is_the_requests_fault() {
        // A force-unlock: the one write the view makes, so every kind can arise.
        let backend = |kind| {
            LockError::backend(
                kind,
                "postgres",
                Operation::ForceUnlock,
                "x",
                "the server said no",
                "boom",
            )
        };
        // A read that got no answer wrote nothing: the backend could not be reached, whatever
        // the provider called it.
        let read = |operation| {
            LockError::backend(
                ErrorKind::OutcomeUnknown,
                "postgres",
                operation,
                "",
                "the connection was lost",
                "boom",
            )
        };
        let cases = [
            (
                LockError::invalid_name("etcd", "a\0b", "it holds NUL"),
                StatusCode::BAD_REQUEST,
            ),
            (
                LockError::invalid_request(
                    "postgres",
                    Operation::ForceUnlock,
                    "x",
                    "the acquisition id \"?\" is not <locked_by>/<locked_at>",
                ),
                StatusCode::BAD_REQUEST,
            ),
            (backend(ErrorKind::OutcomeUnknown), StatusCode::BAD_GATEWAY),
            (read(Operation::List), StatusCode::SERVICE_UNAVAILABLE),
            (read(Operation::Inspect), StatusCode::SERVICE_UNAVAILABLE),
            (
                backend(ErrorKind::CredentialsRefused),
                StatusCode::BAD_GATEWAY,
            ),
            (backend(ErrorKind::CorruptData), StatusCode::BAD_GATEWAY),
            (backend(ErrorKind::Limit), StatusCode::BAD_GATEWAY),
            (
                backend(ErrorKind::Unreachable),
                StatusCode::SERVICE_UNAVAILABLE,
            ),
            (
                backend(ErrorKind::Configuration),
                StatusCode::INTERNAL_SERVER_ERROR,
            ),
            (
                LockError::Timeout {
                    provider: "redis",
                    operation: Operation::ForceUnlock,
                    name: "x".to_owned(),
                    after: Duration::from_secs(3),
                },
                StatusCode::GATEWAY_TIMEOUT,
            ),
            (
                LockError::Unsupported {
                    provider: "redis",
                    operation: Operation::List,
                    name: String::new(),
                },
                StatusCode::NOT_IMPLEMENTED,
            ),
            (LockError::NoActiveLock, StatusCode::INTERNAL_SERVER_ERROR),
        ];
        for (error, status) in cases {
            let message = error.to_string();
            let answer = ApiError::from(error);
            assert_eq!(answer.status, status, "{message}");
            assert_eq!(answer.message, message);
        }
    }
}
