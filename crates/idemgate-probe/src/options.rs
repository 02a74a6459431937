//! `idemgate probe`'s command line ([`ProbeArgs`]) and what it resolves to ([`Options`]).

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Uri};

/// The largest `--max-body-bytes`: the probe sends one byte more (1 GiB).
const MAX_BODY_LIMIT: usize = 1 << 30;

/// Most bytes read from `--body-file` or `--failing-body-file` (16 MiB).
const MAX_BODY_FILE: u64 = 16 << 20;

/// Most bytes read from `--header-file` (1 MiB).
const MAX_HEADER_FILE: u64 = 1 << 20;

/// Fields the probe writes itself: the caller may not set them.
const OWN_FIELDS: [(&str, &str); 5] = [
    ("idempotency-key", "the probe sends its own keys"),
    ("host", "it is the URL's authority"),
    ("content-length", "the probe frames each body itself"),
    ("transfer-encoding", "the probe frames each body itself"),
    ("connection", "the probe uses a connection per request"),
];

/// Which rules are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// idemgate's contract (README "The contract", docs/errors.md): every scenario.
    Idemgate,
    /// draft-ietf-httpapi-idempotency-key-header-07: without the 8-128 key length, the key
    /// syntax idemgate adds, JSON canonicalisation and idemgate's headers.
    Ietf,
}

impl Profile {
    /// `idemgate` or `ietf`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Idemgate => "idemgate",
            Self::Ietf => "ietf",
        }
    }
}

/// `idemgate probe URL ...`: sends crafted requests to one operation of any HTTP API and
/// reports, scenario by scenario, what it did and what the Idempotency-Key contract expects.
///
/// It creates real resources (every covered request may run the operation): point it at a
/// test environment. Exit code 0 when every scenario the profile requires passed, 1 when one
/// failed, 2 when the probe could not run or finish (bad options, the target unreachable,
/// `--timeout` passed).
#[derive(Debug, Clone, clap::Args)]
pub struct ProbeArgs {
    /// The operation's URL, e.g. http://127.0.0.1:8080/payments (http or https; the path
    /// and query are sent as written).
    pub url: String,
    /// PEM file of the CA certificates an `https://` URL is checked against (default: the
    /// system's roots).
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// The operation's method.
    #[arg(long, short = 'X', default_value = "POST")]
    pub method: String,
    /// The request body (JSON for the canonicalisation scenarios; other bodies skip them).
    #[arg(long)]
    pub body_file: Option<PathBuf>,
    /// A header field of every request, `Name: value` (repeatable): the caller's
    /// credentials, `Content-Type` (default `application/json` with a body).
    #[arg(long = "header", short = 'H')]
    pub headers: Vec<String>,
    /// A file of header fields, one `Name: value` per line (`#` comments): secrets kept
    /// off the command line.
    #[arg(long)]
    pub header_file: Option<PathBuf>,
    /// A header field that makes the request a second principal's (e.g. another user's
    /// `Authorization`): replaces the field of that name. Without it the principal
    /// scenarios are skipped.
    #[arg(long)]
    pub second_principal_header: Vec<String>,
    /// Another operation's URL on the same API (same body and headers): the same key there
    /// must not get this operation's answer. Skipped without it.
    #[arg(long)]
    pub second_url: Option<String>,
    /// JSON Pointer (RFC 6901) to the created resource's id in the answer's body; without
    /// it the `Location` field is the id. Two ids for one key mean the operation ran twice.
    #[arg(long)]
    pub id_pointer: Option<String>,
    /// A request body the API answers with a 5xx (the 5xx scenario; skipped without it).
    #[arg(long)]
    pub failing_body_file: Option<PathBuf>,
    /// The body size over which the API answers 413, in bytes.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_body_bytes: usize,
    /// The key lifetime the API advertises, e.g. 5s (the expiry scenario runs when it is 60 s
    /// or less; skipped without it).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub key_lifetime: Option<Duration>,
    /// Which rules are checked.
    #[arg(long, value_enum, default_value_t = Profile::Idemgate)]
    pub profile: Profile,
    /// Print one JSON object (`passed`, `requests`, `scenarios`) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Duplicates sent at once in the concurrency scenario [default: 20, fewer when
    /// --max-requests is under 21]. It and its retry must fit in --max-requests.
    #[arg(long, value_parser = clap::value_parser!(u16).range(2..=200))]
    pub concurrency: Option<u16>,
    /// Most requests sent in all; scenarios past it are reported as skipped.
    #[arg(long, default_value_t = 200)]
    pub max_requests: usize,
    /// Longest one request may take, connection and whole answer included, e.g. 30s.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Longest the whole run may take, e.g. 10m: a scenario still running then is cut off,
    /// the rest are skipped, and the exit code is 2 (the probe could not finish).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// The operation under test and the run's bounds, resolved from [`ProbeArgs`].
#[derive(Debug, Clone)]
pub struct Options {
    /// The target URL.
    pub url: Uri,
    /// The path and query of [`Self::url`], as written.
    pub path: String,
    /// The method.
    pub method: Method,
    /// The body.
    pub body: Bytes,
    /// Header fields of every request (without `Idempotency-Key`).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The fields that make a request the second principal's.
    pub second_principal: Option<Vec<(HeaderName, HeaderValue)>>,
    /// The path and query of `--second-url` (same host).
    pub second_path: Option<String>,
    /// JSON Pointer to the resource id.
    pub id_pointer: Option<String>,
    /// A body answered with a 5xx.
    pub failing_body: Option<Bytes>,
    /// The body limit in bytes.
    pub max_body_bytes: usize,
    /// The advertised key lifetime.
    pub key_lifetime: Option<Duration>,
    /// The rules checked.
    pub profile: Profile,
    /// Duplicates sent at once.
    pub concurrency: usize,
    /// Most requests sent.
    pub max_requests: usize,
    /// Longest one request may take.
    pub request_timeout: Duration,
    /// Longest the whole run may take.
    pub timeout: Duration,
}

impl ProbeArgs {
    /// The options, every file read.
    ///
    /// # Errors
    /// A message naming the option at fault.
    pub fn resolve(&self) -> anyhow::Result<Options> {
        let url = target_url(&self.url)?;
        let path = path_of(&url);
        let method = Method::from_bytes(self.method.as_bytes())
            .map_err(|_| anyhow::anyhow!("--method {}: not a method", self.method))?;
        let body = match &self.body_file {
            Some(f) => read(f, "--body-file", MAX_BODY_FILE)?,
            None => Bytes::new(),
        };
        let mut headers = self.fields()?;
        if !body.is_empty() && !headers.iter().any(|(n, _)| n == http::header::CONTENT_TYPE) {
            let json = HeaderValue::from_static("application/json");
            headers.push((http::header::CONTENT_TYPE, json));
        }
        let second_principal = match self.second_principal_header.is_empty() {
            true => None,
            false => Some(
                (self.second_principal_header.iter())
                    .map(|l| field(l, "--second-principal-header"))
                    .collect::<anyhow::Result<Vec<_>>>()?,
            ),
        };
        let second_path = (self.second_url.as_deref())
            .map(|u| second(&url, u))
            .transpose()?;
        if let Some(p) = &self.id_pointer {
            pointer(p)?;
        }
        let failing_body = (self.failing_body_file.as_ref())
            .map(|f| read(f, "--failing-body-file", MAX_BODY_FILE))
            .transpose()?;
        self.bounds()?;
        Ok(Options {
            url,
            path,
            method,
            body,
            headers,
            second_principal,
            second_path,
            id_pointer: self.id_pointer.clone(),
            failing_body,
            max_body_bytes: self.max_body_bytes,
            key_lifetime: self.key_lifetime,
            profile: self.profile,
            concurrency: self.concurrency(),
            max_requests: self.max_requests,
            request_timeout: self.request_timeout,
            timeout: self.timeout,
        })
    }

    /// The fields of `--header` and `--header-file`, in that order.
    fn fields(&self) -> anyhow::Result<Vec<(HeaderName, HeaderValue)>> {
        let mut fields = (self.headers.iter())
            .map(|h| field(h, "--header"))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let Some(f) = &self.header_file else {
            return Ok(fields);
        };
        let bytes = read(f, "--header-file", MAX_HEADER_FILE)?;
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| anyhow::anyhow!("--header-file {}: not UTF-8 text", f.display()))?;
        let lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim()));
        for (n, line) in lines.filter(|(_, l)| !l.is_empty() && !l.starts_with('#')) {
            let at = format!("--header-file {} line {n}", f.display());
            fields.push(field(line, &at)?);
        }
        Ok(fields)
    }

    /// `--concurrency`, or 20 where `--max-requests` affords it (at least 2).
    fn concurrency(&self) -> usize {
        (self.concurrency.map(usize::from))
            .unwrap_or_else(|| self.max_requests.saturating_sub(1).clamp(2, 20))
    }

    /// The numeric options' bounds.
    fn bounds(&self) -> anyhow::Result<()> {
        if self.max_body_bytes > MAX_BODY_LIMIT {
            anyhow::bail!("--max-body-bytes: at most {MAX_BODY_LIMIT} (1 GiB)");
        }
        if self.max_requests == 0 {
            anyhow::bail!("--max-requests: at least 1");
        }
        // The concurrency scenario sends the duplicates and one retry.
        if let Some(n) = self
            .concurrency
            .filter(|n| usize::from(*n) + 1 > self.max_requests)
        {
            anyhow::bail!(
                "--concurrency {n}: the scenario needs {} requests, more than --max-requests {}",
                n + 1,
                self.max_requests
            );
        }
        if self.request_timeout.is_zero() || self.timeout.is_zero() {
            anyhow::bail!("--request-timeout and --timeout: more than 0");
        }
        Ok(())
    }
}

/// The target URL: `http` or `https` with a host, without user information (credentials
/// go in `--header`, where they are never printed).
fn target_url(text: &str) -> anyhow::Result<Uri> {
    url_option(text, "URL")
}

/// `text` as the URL of `option`, refused with user information (`user:password@`), which
/// is never printed: it holds a password.
fn url_option(text: &str, option: &str) -> anyhow::Result<Uri> {
    let shown = match text.contains('@') {
        true => "(with user information)",
        false => text,
    };
    let url: Uri = text
        .parse()
        .map_err(|e| anyhow::anyhow!("{option} {shown}: {e}"))?;
    if url.authority().is_some_and(|a| a.as_str().contains('@')) {
        anyhow::bail!(
            "{option}: user information (user:password@) is not sent; give credentials with \
             --header 'Authorization: ...'"
        );
    }
    Ok(url)
}

/// Checks `p` is a JSON Pointer (RFC 6901 §3: `""` or `/`-prefixed tokens, `~` only as
/// `~0` or `~1`).
fn pointer(p: &str) -> anyhow::Result<()> {
    if !(p.is_empty() || p.starts_with('/')) {
        anyhow::bail!("--id-pointer {p}: a JSON Pointer starts with / (RFC 6901)");
    }
    let mut rest = p;
    while let Some(at) = rest.find('~') {
        if !matches!(rest.as_bytes().get(at + 1), Some(b'0' | b'1')) {
            anyhow::bail!("--id-pointer {p}: ~ is written only as ~0 or ~1 (RFC 6901 §3)");
        }
        rest = &rest[at + 2..];
    }
    Ok(())
}

fn path_of(url: &Uri) -> String {
    url.path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned())
}

fn second(url: &Uri, second: &str) -> anyhow::Result<String> {
    let other = url_option(second, "--second-url")?;
    if other.authority() != url.authority() || other.scheme() != url.scheme() {
        anyhow::bail!("--second-url {second}: must be on the same scheme, host and port as URL");
    }
    Ok(path_of(&other))
}

fn read(file: &std::path::Path, option: &str, limit: u64) -> anyhow::Result<Bytes> {
    use std::io::Read as _;
    let at = file.display();
    let opened = std::fs::File::open(file).map_err(|e| anyhow::anyhow!("{option} {at}: {e}"))?;
    let mut bytes = Vec::new();
    (opened.take(limit + 1).read_to_end(&mut bytes))
        .map_err(|e| anyhow::anyhow!("{option} {at}: {e}"))?;
    if bytes.len() as u64 > limit {
        anyhow::bail!("{option} {at}: over {limit} bytes");
    }
    Ok(bytes.into())
}

/// `Name: value` as a header field. Errors name the option and the field's name, never its
/// value (a credential).
fn field(line: &str, option: &str) -> anyhow::Result<(HeaderName, HeaderValue)> {
    let (name, value) = line
        .split_once(':')
        .ok_or_else(|| anyhow::anyhow!("{option}: a field without `:` (expected `Name: value`)"))?;
    let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
        let shown: String = name.trim().chars().flat_map(char::escape_default).collect();
        anyhow::anyhow!("{option}: \"{shown}\" is not a field name (RFC 9110 §5.1)")
    })?;
    if let Some((_, why)) = OWN_FIELDS.iter().find(|(n, _)| *n == name.as_str()) {
        anyhow::bail!("{option}: {name} is not accepted: {why}");
    }
    let value = HeaderValue::from_str(value.trim())
        .map_err(|_| anyhow::anyhow!("{option} {name}: the value is not a field value"))?;
    Ok((name, value))
}
