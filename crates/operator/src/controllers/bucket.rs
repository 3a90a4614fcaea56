//! The container that moves a snapshot between a Pod's volume and an S3-compatible bucket:
//! `app-operator object-store put|get` on the operator's own image, with the user's Secret
//! mounted (the operator itself never reads the credentials). Backup Jobs upload with it, a
//! restoring member downloads with it.

use app_operator_api::etcdbackup::S3Source;
use k8s_openapi::api::core::v1::{Container, Secret, Volume, VolumeMount};
use k8s_openapi::jiff::Timestamp;
use kube::Api;

use crate::controllers::etcdcluster::secret_volume;
use crate::controllers::restricted::scratch;
use crate::reconcile::Error;

/// Where the Secret's `credentials` and `config` files are mounted.
const CREDENTIALS_DIR: &str = "/etc/app-operator/s3";
const CREDENTIALS_VOLUME: &str = "s3-credentials";

/// Which way the snapshot goes.
pub enum Transfer<'a> {
    /// Upload the file; then apply the series' retention.
    Put { retention: Option<Retention<'a>> },
    /// Download to the file (checked against the upload's SHA-256).
    Get,
    /// Download the object of a directory uploaded last at or before a time.
    LatestBefore(Timestamp),
}

/// What a series of uploads keeps: objects whose keys start with `series` (then
/// `yyyymmdd-hhmmss`), the newest `keep`, none older than `max_age_hours`.
#[derive(Clone, Copy)]
pub struct Retention<'a> {
    pub series: &'a str,
    pub keep: Option<i32>,
    pub max_age_hours: Option<i64>,
}

/// The container (named `name`) and the Secret's volume it needs. `object` is the
/// `<bucket>/<key>` moved; `file` the path in the Pod, in `mount`.
pub fn transfer_container(
    name: &str,
    helper_image: &str,
    s3: &S3Source,
    object: &str,
    transfer: &Transfer<'_>,
    file: &str,
    mount: VolumeMount,
) -> (Container, Volume) {
    let (volume, credentials) = credentials_volume(s3);
    let verb = match transfer {
        Transfer::Put { .. } => "put",
        Transfer::Get | Transfer::LatestBefore(_) => "get",
    };
    let mut args = arguments(verb, s3, object, file);
    if let Transfer::LatestBefore(time) = transfer {
        args.push(format!("--latest-before={time}"));
    }
    if let Transfer::Put {
        retention: Some(retention),
    } = transfer
    {
        args.push(format!("--series={}", retention.series));
        if let Some(keep) = retention.keep {
            args.push(format!("--keep={keep}"));
        }
        if let Some(hours) = retention.max_age_hours {
            args.push(format!("--max-age-hours={hours}"));
        }
    }
    let container = Container {
        name: name.to_owned(),
        image: Some(helper_image.to_owned()),
        args: Some(args),
        volume_mounts: Some(vec![mount, credentials]),
        // Its last line (the store's refusal, a damaged object) is what the status quotes.
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    };
    (container, volume)
}

/// The Secret's volume, and its mount at the directory `--credentials-dir` names.
pub fn credentials_volume(s3: &S3Source) -> (Volume, VolumeMount) {
    secret_volume(&s3.aws_secret, CREDENTIALS_VOLUME, CREDENTIALS_DIR)
}

/// `object-store <verb>` of `object` to or from `file`, through `s3`'s endpoint.
fn arguments(verb: &str, s3: &S3Source, object: &str, file: &str) -> Vec<String> {
    let mut args = vec![
        "object-store".to_owned(),
        verb.to_owned(),
        format!("--path={object}"),
        format!("--file={file}"),
        format!("--credentials-dir={CREDENTIALS_DIR}"),
    ];
    if let Some(endpoint) = &s3.endpoint {
        args.push(format!("--endpoint={endpoint}"));
    }
    if s3.force_path_style {
        args.push("--force-path-style".to_owned());
    }
    args
}

/// Where a container of another image (PostgreSQL's) finds the operator's binary, copied there
/// by [`helper_install`].
/// Not `/app-operator`: that is the binary itself in the operator's image.
const HELPER_DIR: &str = "/opt/app-operator";
const HELPER_VOLUME: &str = "app-operator";

/// The init container that copies the operator's binary into an emptyDir, the volume, and its
/// mount for the containers that run it.
pub fn helper_install(helper_image: &str) -> (Container, Volume, VolumeMount) {
    let (volume, mount) = scratch(HELPER_VOLUME, HELPER_DIR);
    let install = Container {
        name: "install-app-operator".to_owned(),
        image: Some(helper_image.to_owned()),
        args: Some(vec![
            "object-store".to_owned(),
            "install".to_owned(),
            format!("--to={HELPER_DIR}/app-operator"),
        ]),
        volume_mounts: Some(vec![mount.clone()]),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    };
    (install, volume, mount)
}

/// PostgreSQL's side of a write-ahead log archive in `s3` (`<key>/wal/<segment>`).
#[derive(Clone, Copy)]
pub enum Wal {
    /// `archive_command`: uploads `%p` as `%f`, never replacing a segment.
    Archive,
    /// `restore_command`: downloads `%f` to `%p`.
    Restore,
}

/// The shell command line PostgreSQL runs for `wal` (it substitutes `%f` and `%p`), with the
/// binary [`helper_install`] copied and the Secret mounted by [`credentials_volume`].
pub fn wal_command(wal: Wal, s3: &S3Source) -> String {
    let object = format!("{}/wal/%f", s3.path.trim_end_matches('/'));
    let mut args = match wal {
        Wal::Archive => arguments("put", s3, &object, "%p"),
        Wal::Restore => arguments("get", s3, &object, "%p"),
    };
    if let Wal::Archive = wal {
        args.push("--if-absent".to_owned());
    }
    std::iter::once(format!("{HELPER_DIR}/app-operator"))
        .chain(args)
        .map(|word| shell_quoted(&word))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `word` as one word for `sh` (the endpoint is the user's text).
fn shell_quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// A `fetch` container downloading `s3`'s object to `file`, before a restore reads it.
pub fn fetch_container(
    helper_image: &str,
    s3: &S3Source,
    file: &str,
    mount: VolumeMount,
) -> (Container, Volume) {
    transfer_container(
        "fetch",
        helper_image,
        s3,
        &s3.path,
        &Transfer::Get,
        file,
        mount,
    )
}

/// The key of a snapshot: `<key>` for a single backup, `<key>_<yyyymmdd-hhmmss>` for each of a
/// periodic series (so the names sort by time and the series shares the prefix `<key>_`).
pub fn series_object(path: &str, stamp: Option<&str>) -> String {
    match stamp {
        Some(stamp) => format!("{path}_{stamp}"),
        None => path.to_owned(),
    }
}

/// The key of `<bucket>/<key>`.
pub fn key(path: &str) -> &str {
    path.split_once('/').map_or("", |(_, key)| key)
}

/// The key prefix a periodic series shares: `<key>_` of `<bucket>/<key>`.
pub fn series_prefix(path: &str) -> String {
    format!("{}_", key(path))
}

/// What a transfer needs before its Pod is created: the operator's image (returned), and the
/// Secret that `field` (`…s3`) names. `transfer` says what runs, for the message.
pub async fn ready(
    client: &kube::Client,
    namespace: &str,
    helper_image: Option<&str>,
    s3: &S3Source,
    field: &str,
    transfer: &str,
) -> Result<String, Error> {
    let helper_image = helper_image.ok_or_else(|| Error::Waiting {
        reason: "HelperImageUnknown",
        message: format!(
            "{transfer} runs the operator's own image, which this operator does not know: it runs outside a Pod; start it with --helper-image (APP_OPERATOR_HELPER_IMAGE) naming its image"
        ),
    })?;
    credentials_exist(
        client,
        namespace,
        &s3.aws_secret,
        &format!("{field}.awsSecret"),
    )
    .await?;
    Ok(helper_image.to_owned())
}

/// The Secret `field` names exists, read by its metadata only (the operator never reads the
/// credentials): without it the Pod would wait for its volume, saying so only in events.
async fn credentials_exist(
    client: &kube::Client,
    namespace: &str,
    secret: &str,
    field: &str,
) -> Result<(), Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let found = secrets
        .get_metadata_opt(secret)
        .await
        .map_err(|source| Error::Get {
            kind: "Secret".into(),
            name: secret.to_owned(),
            source,
        })?;
    match found {
        Some(_) => Ok(()),
        None => Err(Error::Waiting {
            reason: "CredentialsNotFound",
            message: format!(
                "{field}: Secret {secret} does not exist in namespace {namespace}; create it with the AWS shared files `credentials` (and optionally `config`)"
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upload_names_the_object_its_secret_endpoint_and_series() {
        let s3 = S3Source {
            path: "backups/ns/etcd.db".into(),
            aws_secret: "bucket-keys".into(),
            endpoint: Some("http://10.0.0.1:7070".into()),
            force_path_style: true,
        };
        let object = series_object(&s3.path, Some("20261128-101500"));
        let (container, volume) = transfer_container(
            "upload",
            "app-operator:v1",
            &s3,
            &object,
            &Transfer::Put {
                retention: Some(Retention {
                    series: "ns/etcd.db_",
                    keep: Some(2),
                    max_age_hours: None,
                }),
            },
            "/backups/snapshot.db",
            VolumeMount {
                name: "snapshots".into(),
                mount_path: "/backups".into(),
                ..VolumeMount::default()
            },
        );
        assert_eq!(
            container.args.unwrap(),
            [
                "object-store",
                "put",
                "--path=backups/ns/etcd.db_20261128-101500",
                "--file=/backups/snapshot.db",
                "--credentials-dir=/etc/app-operator/s3",
                "--endpoint=http://10.0.0.1:7070",
                "--force-path-style",
                "--series=ns/etcd.db_",
                "--keep=2",
            ]
        );
        assert_eq!(
            volume.secret.unwrap().secret_name.as_deref(),
            Some("bucket-keys")
        );
        assert_eq!(container.image.as_deref(), Some("app-operator:v1"));
        assert_eq!(series_prefix(&s3.path), "ns/etcd.db_");
    }

    #[test]
    fn postgres_archives_each_segment_once_and_restores_it_by_name_through_the_shell() {
        let s3 = S3Source {
            path: "backups/ns/db/".into(),
            aws_secret: "bucket-keys".into(),
            endpoint: Some("http://10.0.0.1:7070/it's".into()),
            force_path_style: true,
        };
        assert_eq!(
            wal_command(Wal::Archive, &s3),
            "'/opt/app-operator/app-operator' 'object-store' 'put' '--path=backups/ns/db/wal/%f' '--file=%p' '--credentials-dir=/etc/app-operator/s3' '--endpoint=http://10.0.0.1:7070/it'\\''s' '--force-path-style' '--if-absent'"
        );
        assert!(
            wal_command(Wal::Restore, &s3)
                .starts_with("'/opt/app-operator/app-operator' 'object-store' 'get' '--path=backups/ns/db/wal/%f' '--file=%p'")
        );
    }
}
