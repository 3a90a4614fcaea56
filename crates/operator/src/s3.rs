//! `app-operator object-store put|get`: the operator's own binary, run in backup Jobs and in a
//! restoring member's init container, moves a snapshot between a file and an S3-compatible
//! bucket. The operator process never holds the credentials: only these Pods mount the Secret.
//!
//! An upload is multipart (an interrupted one leaves no object, so a partial snapshot is never
//! listed), each request is retried with backoff by `object_store`, and the file's SHA-256
//! travels with the object as `x-amz-meta-sha256`; a download writes `<file>.part`, checks the
//! bytes against it and only then renames it to the file a restore reads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use http_body_util::BodyExt;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use k8s_openapi::jiff::{self, Timestamp};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::client::{
    ClientOptions, HttpClient, HttpError, HttpErrorKind, HttpRequest, HttpRequestBody,
    HttpResponse, HttpResponseBody, HttpService,
};
use object_store::path::Path as ObjectPath;
use object_store::{
    Attribute, Attributes, GetOptions, ObjectStore, ObjectStoreExt, PutMultipartOptions,
    RetryConfig, WriteMultipart,
};
use ring::digest::{Context, SHA256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The user metadata key the SHA-256 of an uploaded file is kept under (`x-amz-meta-sha256`).
const CHECKSUM_METADATA: &str = "sha256";

/// Parts of a multipart upload; S3 takes 5 MiB at least (but for the last).
const PART_SIZE: usize = 8 << 20;

/// How long one request is retried before the command gives up (within the Job's deadline).
const RETRY_TIMEOUT: Duration = Duration::from_secs(60);

/// Files the mounted Secret holds: the AWS shared credentials and config files.
pub const CREDENTIALS_FILE: &str = "credentials";
pub const CONFIG_FILE: &str = "config";

#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    #[error("{0}")]
    Input(String),
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// One line: what was asked, and what the store answered.
    #[error("{0}")]
    Store(String),
}

/// `<bucket>/<key>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub bucket: String,
    pub key: String,
}

impl Location {
    pub fn parse(path: &str) -> Result<Location, S3Error> {
        match path.split_once('/') {
            Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() => Ok(Location {
                bucket: bucket.to_owned(),
                key: key.to_owned(),
            }),
            _ => Err(S3Error::Input(format!("{path:?} is not <bucket>/<key>"))),
        }
    }
}

/// The `default` profile of the AWS shared files.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub region: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// The `[default]` section (`[profile default]` in `config`) of an INI file, as keys and values.
fn default_profile(text: &str) -> HashMap<String, String> {
    let mut values = HashMap::new();
    let mut in_default = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let section = section.trim();
            in_default = section == "default" || section == "profile default";
        } else if in_default && let Some((key, value)) = line.split_once('=') {
            values.insert(key.trim().to_owned(), value.trim().to_owned());
        }
    }
    values
}

impl Credentials {
    /// From the text of `credentials` and, when present, `config`.
    pub fn parse(credentials: &str, config: Option<&str>) -> Result<Credentials, S3Error> {
        let keys = default_profile(credentials);
        let key = |name: &str| {
            keys.get(name).filter(|v| !v.is_empty()).cloned().ok_or_else(|| {
                S3Error::Input(format!(
                    "the Secret's {CREDENTIALS_FILE} file has no {name} in its [default] profile"
                ))
            })
        };
        Ok(Credentials {
            access_key_id: key("aws_access_key_id")?,
            secret_access_key: key("aws_secret_access_key")?,
            region: config
                .map(default_profile)
                .and_then(|c| c.get("region").cloned())
                .filter(|r| !r.is_empty()),
        })
    }

    /// From the directory the Secret is mounted at.
    pub fn read(dir: &Path) -> Result<Credentials, S3Error> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path).map_err(|source| S3Error::Io {
                action: "reading",
                path,
                source,
            })
        };
        let config = read(CONFIG_FILE).ok();
        Credentials::parse(&read(CREDENTIALS_FILE)?, config.as_deref())
    }
}

/// Where an object is and how to reach it.
#[derive(Clone, Debug)]
pub struct Target {
    pub location: Location,
    pub endpoint: Option<String>,
    pub force_path_style: bool,
    pub credentials: Credentials,
}

fn store(target: &Target) -> Result<AmazonS3, S3Error> {
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(&target.location.bucket)
        .with_access_key_id(&target.credentials.access_key_id)
        .with_secret_access_key(&target.credentials.secret_access_key)
        .with_region(target.credentials.region.as_deref().unwrap_or("us-east-1"))
        .with_virtual_hosted_style_request(!target.force_path_style)
        .with_retry(RetryConfig {
            retry_timeout: RETRY_TIMEOUT,
            ..RetryConfig::default()
        })
        .with_http_connector(Connector);
    if let Some(endpoint) = &target.endpoint {
        builder = builder
            .with_endpoint(endpoint.trim_end_matches('/'))
            .with_allow_http(endpoint.starts_with("http://"));
    }
    builder
        .build()
        .map_err(|error| S3Error::Store(one_line(&error)))
}

/// Which objects of a series (keys starting with `series`, then `yyyymmdd-hhmmss`) to keep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retention {
    pub series: String,
    /// The newest this many.
    pub keep: Option<usize>,
    /// None older than this.
    pub max_age: Option<Duration>,
}

/// Uploads `file` to the target, then, with `retention`, deletes the objects of its series that
/// it no longer keeps. With `if_absent` (WAL archiving) an object already there is never
/// replaced: the same bytes are done already, other bytes are an error (another database
/// archiving to the same path would otherwise overwrite the history a restore needs). Returns
/// what it did, for the Job's log.
pub async fn put(
    target: &Target,
    file: &Path,
    retention: Option<&Retention>,
    if_absent: bool,
) -> Result<String, S3Error> {
    let checksum = sha256_of(file).await?;
    let store = store(target)?;
    let path = ObjectPath::from(target.location.key.as_str());
    let shown = format!("{}/{}", target.location.bucket, target.location.key);
    let failed = |error| store_error(target, "uploading", &target.location.key, &error);
    if if_absent {
        let head = GetOptions {
            head: true,
            ..GetOptions::default()
        };
        match store.get_opts(&path, head).await {
            Err(object_store::Error::NotFound { .. }) => {}
            Err(error) => return Err(failed(error)),
            Ok(existing) => {
                return match uploaded_checksum(&existing.attributes) {
                    Some(uploaded) if uploaded == checksum => Ok(format!(
                        "{shown} already holds these bytes (sha256 {checksum})"
                    )),
                    uploaded => Err(S3Error::Store(format!(
                        "{shown} already holds other bytes (sha256 {}, this file's is {checksum}): not replaced; is another database archiving to this path?",
                        uploaded.as_deref().unwrap_or("unknown")
                    ))),
                };
            }
        }
    }
    let attributes = Attributes::from_iter([(
        Attribute::Metadata(CHECKSUM_METADATA.into()),
        checksum.clone(),
    )]);
    let upload = store
        .put_multipart_opts(
            &path,
            PutMultipartOptions {
                attributes,
                ..PutMultipartOptions::default()
            },
        )
        .await
        .map_err(failed)?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
    let mut source = open(file).await?;
    let mut buffer = vec![0; PART_SIZE];
    let mut size: u64 = 0;
    loop {
        let read = match source.read(&mut buffer).await {
            Ok(0) => break,
            Ok(read) => read,
            Err(source) => {
                // Nothing is listed: the parts uploaded so far are discarded.
                let _ = writer.abort().await;
                return Err(io_error("reading", file, source));
            }
        };
        if let Err(error) = writer.wait_for_capacity(2).await {
            let _ = writer.abort().await;
            return Err(failed(error));
        }
        writer.write(buffer.get(..read).unwrap_or_default());
        size += read as u64;
    }
    writer.finish().await.map_err(failed)?;
    let mut done = format!("uploaded {shown} ({size} bytes, sha256 {checksum})");
    if let Some(retention) = retention {
        let prefix = retention.series.as_str();
        // `object_store` lists whole path segments (`a/b` lists `a/b/…`, not `a/b_…`): list the
        // series' directory; `expired` keeps to the series.
        let directory = prefix
            .rsplit_once('/')
            .map(|(dir, _)| ObjectPath::from(dir));
        let listed: Vec<String> = store
            .list(directory.as_ref())
            .map_ok(|meta| meta.location.to_string())
            .try_collect()
            .await
            .map_err(|error| store_error(target, "listing", prefix, &error))?;
        let expired = expired(&listed, retention, Timestamp::now());
        for key in &expired {
            store
                .delete(&ObjectPath::from(key.as_str()))
                .await
                .map_err(|error| store_error(target, "deleting", key, &error))?;
        }
        done.push_str(&format!(
            "; retention of {prefix}* deleted {}",
            if expired.is_empty() {
                "none".to_owned()
            } else {
                expired.join(", ")
            }
        ));
    }
    Ok(done)
}

/// Downloads the target to `file`, through `<file>.part`, refusing an object whose bytes do not
/// match the SHA-256 it was uploaded with.
///
/// With `latest_before`, the target's key is a directory, and the object downloaded is the one
/// in it uploaded last at or before that time (a base backup a point-in-time restore starts
/// from).
pub async fn get(
    target: &Target,
    file: &Path,
    latest_before: Option<Timestamp>,
) -> Result<String, S3Error> {
    let store = store(target)?;
    let key = match latest_before {
        None => target.location.key.clone(),
        Some(time) => {
            let directory = &target.location.key;
            let listed: Vec<(String, Timestamp)> = store
                .list(Some(&ObjectPath::from(directory.as_str())))
                .map_ok(|meta| {
                    let uploaded =
                        Timestamp::from_millisecond(meta.last_modified.timestamp_millis())
                            .unwrap_or(Timestamp::MAX);
                    (meta.location.to_string(), uploaded)
                })
                .try_collect()
                .await
                .map_err(|error| store_error(target, "listing", directory, &error))?;
            latest_uploaded_before(&listed, time).ok_or_else(|| {
                S3Error::Store(format!(
                    "no object under {}/{directory}/ was uploaded at or before {time}: the restore needs a backup taken before the time it restores to",
                    target.location.bucket
                ))
            })?
        }
    };
    let shown = format!("{}/{key}", target.location.bucket);
    let failed = |error| store_error(target, "downloading", &key, &error);
    let result = store
        .get(&ObjectPath::from(key.as_str()))
        .await
        .map_err(failed)?;
    let expected = uploaded_checksum(&result.attributes);
    let mut partial = file.as_os_str().to_owned();
    partial.push(".part");
    let partial = PathBuf::from(partial);
    let mut out = tokio::fs::File::create(&partial)
        .await
        .map_err(|source| io_error("creating", &partial, source))?;
    let mut hash = Context::new(&SHA256);
    let mut size: u64 = 0;
    let mut stream = result.into_stream();
    while let Some(chunk) = stream.try_next().await.map_err(failed)? {
        hash.update(&chunk);
        size += chunk.len() as u64;
        out.write_all(&chunk)
            .await
            .map_err(|source| io_error("writing", &partial, source))?;
    }
    out.sync_all()
        .await
        .map_err(|source| io_error("writing", &partial, source))?;
    let actual = hex(hash.finish().as_ref());
    let checked = match expected {
        Some(expected) if expected != actual => {
            return Err(S3Error::Store(format!(
                "object {shown} is damaged: its bytes have SHA-256 {actual}, it was uploaded with {expected}"
            )));
        }
        Some(_) => "its SHA-256 matches the upload's",
        // Not uploaded by a backup Job: nothing to compare with (etcd checks its own hash).
        None => "uploaded without a SHA-256 to compare",
    };
    tokio::fs::rename(&partial, file)
        .await
        .map_err(|source| io_error("renaming", &partial, source))?;
    Ok(format!("downloaded {shown} ({size} bytes; {checked})"))
}

/// Copies this binary to `to` (through `<to>.part`, executable by all), so a container of
/// another image can run `object-store` from a shared volume.
pub fn install(to: &Path) -> Result<String, S3Error> {
    use std::os::unix::fs::PermissionsExt;
    let this = std::env::current_exe().map_err(|source| io_error("finding", to, source))?;
    let mut partial = to.as_os_str().to_owned();
    partial.push(".part");
    let partial = PathBuf::from(partial);
    std::fs::copy(&this, &partial).map_err(|source| io_error("copying to", &partial, source))?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))
        .map_err(|source| io_error("making executable", &partial, source))?;
    std::fs::rename(&partial, to).map_err(|source| io_error("renaming", &partial, source))?;
    Ok(format!("installed {} as {}", this.display(), to.display()))
}

/// The key, of those listed with their upload times, uploaded last at or before `time`.
pub fn latest_uploaded_before(listed: &[(String, Timestamp)], time: Timestamp) -> Option<String> {
    listed
        .iter()
        .filter(|(_, uploaded)| *uploaded <= time)
        .max_by_key(|(key, uploaded)| (*uploaded, key.clone()))
        .map(|(key, _)| key.clone())
}

/// The SHA-256 an object was uploaded with (`x-amz-meta-sha256`).
fn uploaded_checksum(attributes: &Attributes) -> Option<String> {
    attributes
        .get(&Attribute::Metadata(CHECKSUM_METADATA.into()))
        .map(|value| value.to_string())
}

/// Keys of the series that `retention` no longer keeps: beyond the newest `keep`, or older than
/// `max_age` at `now`. Their names go on with `yyyymmdd-hhmmss` (UTC), so they sort by time; the
/// newest is always kept, and a key whose time does not parse is never deleted for its age.
pub fn expired(listed: &[String], retention: &Retention, now: Timestamp) -> Vec<String> {
    let prefix = retention.series.as_str();
    let mut series: Vec<&String> = listed.iter().filter(|k| k.starts_with(prefix)).collect();
    series.sort_unstable_by(|a, b| b.cmp(a));
    let too_old = |key: &str| {
        let (Some(max_age), Some(stamp)) =
            (retention.max_age, key.get(prefix.len()..prefix.len() + 15))
        else {
            return false;
        };
        let Ok(taken) = jiff::civil::DateTime::strptime("%Y%m%d-%H%M%S", stamp)
            .and_then(|t| t.to_zoned(jiff::tz::TimeZone::UTC))
        else {
            return false;
        };
        now.duration_since(taken.timestamp()).unsigned_abs() > max_age
    };
    series
        .into_iter()
        .enumerate()
        .skip(1)
        .filter(|(index, key)| retention.keep.is_some_and(|keep| *index >= keep) || too_old(key))
        .map(|(_, key)| key.clone())
        .collect()
}

/// `<action> <bucket>/<key>: ` and what the store said, in one line: the status and S3's error
/// code and message when it answered, else the innermost cause (a refused connection, an
/// unknown host).
fn store_error(target: &Target, action: &str, key: &str, error: &object_store::Error) -> S3Error {
    let bucket = &target.location.bucket;
    let line = one_line(error);
    let said = if line.starts_with("403 ") {
        format!("the bucket {bucket} refused the Secret's credentials: {line}")
    } else if unreachable(error) {
        let endpoint = target.endpoint.as_deref().unwrap_or("AWS S3");
        format!("the store at {endpoint} could not be reached: {line}")
    } else {
        line
    };
    S3Error::Store(format!("{action} {bucket}/{key}: {said}"))
}

/// The request never got an answer: no connection to the store (after the retries).
fn unreachable(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(cause) = source {
        if cause
            .downcast_ref::<HttpError>()
            .is_some_and(|http| http.kind() == HttpErrorKind::Connect)
        {
            return true;
        }
        source = cause.source();
    }
    false
}

fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut chain = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        chain.push(cause.to_string());
        source = cause.source();
    }
    summarize(&chain)
}

/// `chain` is an error's messages from the outermost to the innermost.
fn summarize(chain: &[String]) -> String {
    let text = chain.join(": ");
    let after = |open: &str| Some(text.get(text.find(open)? + open.len()..)?.trim_start());
    let between = |open: &str, close: &str| {
        let rest = after(open)?;
        Some(rest.get(..rest.find(close)?)?.trim().to_owned())
    };
    let status =
        between("status code: ", ":").or_else(|| after("status code: ").map(str::to_owned));
    if let Some(status) = status {
        return match (
            between("<Code>", "</Code>"),
            between("<Message>", "</Message>"),
        ) {
            (Some(code), Some(message)) => format!("{status}, {code}: {message}"),
            (Some(code), None) => format!("{status}, {code}"),
            _ => status,
        };
    }
    chain
        .last()
        .map(|inner| inner.lines().next().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

async fn sha256_of(file: &Path) -> Result<String, S3Error> {
    let mut source = open(file).await?;
    let mut hash = Context::new(&SHA256);
    let mut buffer = vec![0; 1 << 20];
    loop {
        match source.read(&mut buffer).await {
            Ok(0) => break,
            Ok(read) => hash.update(buffer.get(..read).unwrap_or_default()),
            Err(source) => return Err(io_error("reading", file, source)),
        }
    }
    Ok(hex(hash.finish().as_ref()))
}

async fn open(file: &Path) -> Result<tokio::fs::File, S3Error> {
    tokio::fs::File::open(file)
        .await
        .map_err(|source| io_error("opening", file, source))
}

fn io_error(action: &'static str, path: &Path, source: std::io::Error) -> S3Error {
    S3Error::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `object_store`'s HTTP through the hyper and rustls the operator already has (its `aws`
/// feature would add reqwest and a second TLS stack).
#[derive(Debug)]
struct Connector;

impl object_store::client::HttpConnector for Connector {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new()).build(https);
        Ok(HttpClient::new(Hyper(Arc::new(client))))
    }
}

type HyperClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, HttpRequestBody>;

#[derive(Debug)]
struct Hyper(Arc<HyperClient>);

#[async_trait::async_trait]
impl HttpService for Hyper {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let response = self.0.request(request).await.map_err(|error| {
            let kind = if error.is_connect() {
                HttpErrorKind::Connect
            } else {
                HttpErrorKind::Request
            };
            HttpError::new(kind, error)
        })?;
        let (parts, body) = response.into_parts();
        let body = body.map_err(|error| HttpError::new(HttpErrorKind::Request, error));
        Ok(HttpResponse::from_parts(parts, HttpResponseBody::new(body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_come_from_the_default_profile_of_the_aws_files() {
        let credentials = "[other]\naws_access_key_id = NO\n\n[default]\naws_access_key_id = AKID\naws_secret_access_key=SECRET\n";
        let config = "[profile default]\nregion = eu-west-1\n";
        let parsed = Credentials::parse(credentials, Some(config)).unwrap();
        assert_eq!(parsed.access_key_id, "AKID");
        assert_eq!(parsed.secret_access_key, "SECRET");
        assert_eq!(parsed.region.as_deref(), Some("eu-west-1"));
        assert!(!format!("{parsed:?}").contains("SECRET"), "never logged");
        let missing = Credentials::parse("[default]\naws_access_key_id = AKID\n", None);
        assert_eq!(
            missing.unwrap_err().to_string(),
            "the Secret's credentials file has no aws_secret_access_key in its [default] profile"
        );
    }

    #[test]
    fn a_path_is_a_bucket_then_a_key() {
        assert_eq!(
            Location::parse("backups/ns/etcd.db").unwrap(),
            Location {
                bucket: "backups".into(),
                key: "ns/etcd.db".into()
            }
        );
        for wrong in ["backups", "backups/", "/key"] {
            assert!(Location::parse(wrong).is_err(), "{wrong}");
        }
    }

    #[test]
    fn a_point_in_time_restore_starts_from_the_last_base_backup_uploaded_before_its_target() {
        let at = |time: &str| time.parse::<Timestamp>().unwrap();
        let listed = [
            (
                "k/base/db-backup-20261128-100000.tar.gz",
                "2026-11-28T10:00:05Z",
            ),
            (
                "k/base/db-backup-20261128-110000.tar.gz",
                "2026-11-28T11:00:05Z",
            ),
            (
                "k/base/db-backup-20261128-120000.tar.gz",
                "2026-11-28T12:00:05Z",
            ),
        ]
        .map(|(key, uploaded)| (key.to_owned(), at(uploaded)));
        let latest = |time| latest_uploaded_before(&listed, at(time));
        assert_eq!(
            latest("2026-11-28T11:30:00Z").as_deref(),
            Some("k/base/db-backup-20261128-110000.tar.gz")
        );
        assert_eq!(
            latest("2026-11-28T11:00:05Z").as_deref(),
            Some("k/base/db-backup-20261128-110000.tar.gz"),
            "uploaded exactly at the target"
        );
        assert_eq!(latest("2026-11-28T10:00:04Z"), None, "nothing that old");
    }

    #[test]
    fn a_series_keeps_its_newest_by_count_and_by_age() {
        let listed: Vec<String> = [
            "ns/etcd.db_20261128-100000",
            "ns/etcd.db_20261128-120000",
            "ns/etcd.db_20261128-110000",
            "ns/other.db_20261128-090000",
        ]
        .map(String::from)
        .to_vec();
        let retention = |keep: Option<usize>, hours: Option<u64>| Retention {
            series: "ns/etcd.db_".into(),
            keep,
            max_age: hours.map(|h| Duration::from_secs(h * 3600)),
        };
        let now: Timestamp = "2026-11-28T12:30:00Z".parse().unwrap();
        assert_eq!(
            expired(&listed, &retention(Some(2), None), now),
            ["ns/etcd.db_20261128-100000"]
        );
        assert!(expired(&listed, &retention(Some(3), None), now).is_empty());
        // 11:00 is 1.5 h old, 10:00 2.5 h.
        assert_eq!(
            expired(&listed, &retention(None, Some(2)), now),
            ["ns/etcd.db_20261128-100000"]
        );
        assert_eq!(
            expired(&listed, &retention(None, Some(1)), now),
            ["ns/etcd.db_20261128-110000", "ns/etcd.db_20261128-100000"]
        );
        // The newest stays, however old.
        let later: Timestamp = "2026-12-28T12:30:00Z".parse().unwrap();
        assert_eq!(expired(&listed, &retention(None, Some(1)), later).len(), 2);
        // SampleDB's dumps: `<prefix>/<db>-backup-<yyyymmdd-hhmmss>.dump`.
        let dumps = [
            "k/db-backup-20261128-100000.dump".to_owned(),
            "k/db-backup-20261128-120000.dump".to_owned(),
        ];
        let dump_retention = Retention {
            series: "k/db-backup-".into(),
            keep: None,
            max_age: Some(Duration::from_secs(3600)),
        };
        assert_eq!(
            expired(&dumps, &dump_retention, now),
            ["k/db-backup-20261128-100000.dump"]
        );
    }

    #[test]
    fn a_store_error_is_one_line_with_the_status_and_s3s_code() {
        let refused = [
            "Generic S3 error: Error performing PUT http://10.0.0.1:7070/backups/x in 1ms".to_owned(),
            "Server returned non-2xx status code: 403 Forbidden: <?xml version=\"1.0\"?>\n<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match</Message></Error>".to_owned(),
        ];
        assert_eq!(
            summarize(&refused),
            "403 Forbidden, SignatureDoesNotMatch: The request signature we calculated does not match"
        );
        let unreachable = [
            "Generic S3 error: Error performing PUT http://10.0.0.1:1/backups/x in 60s, after 9 retries".to_owned(),
            "HTTP error: client error (Connect)".to_owned(),
            "tcp connect error: Connection refused (os error 111)".to_owned(),
        ];
        assert_eq!(
            summarize(&unreachable),
            "tcp connect error: Connection refused (os error 111)"
        );
    }
}
