//! The `app-operator` binary: command-line parsing and nothing else.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use app_operator::etcd::address::Addressing;
use app_operator::etcd::{EtcdClient, MemberDns, MemberPods, MemberResolver};
use app_operator::manager::leader::LeaderElection;
use app_operator::manager::{self, ControllerKind, Options, Timeouts};
use app_operator::s3;
use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::jiff::Timestamp;

#[derive(Parser)]
#[command(
    name = "app-operator",
    version,
    about = "Kubernetes operator for MyApp, AppCluster, Sample, EtcdCluster, EtcdBackup and SampleDB resources"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controllers (the manager).
    Run(Box<RunArgs>),
    /// Print every CustomResourceDefinition as YAML.
    Crds,
    /// Upload a backup to, or download one from, an S3-compatible bucket (what backup Jobs and
    /// restoring Pods run, on the operator's own image).
    #[command(subcommand)]
    ObjectStore(ObjectStoreCommand),
    /// Print the version.
    Version,
}

#[derive(Subcommand)]
enum ObjectStoreCommand {
    /// Upload FILE to PATH (multipart, with its SHA-256); with --series, then delete the
    /// objects of the series beyond the newest --keep or older than --max-age-hours.
    Put {
        #[command(flatten)]
        bucket: BucketArgs,
        #[arg(long)]
        file: PathBuf,
        /// Key prefix of the series this upload belongs to (`<key>_` of periodic etcd backups);
        /// its keys go on with `yyyymmdd-hhmmss`.
        #[arg(long)]
        series: Option<String>,
        /// How many objects of the series to keep.
        #[arg(long, requires = "series", value_parser = clap::value_parser!(u16).range(1..))]
        keep: Option<u16>,
        /// Delete objects of the series older than this.
        #[arg(long, requires = "series", value_parser = clap::value_parser!(u32).range(1..))]
        max_age_hours: Option<u32>,
        /// Never replace an object: the same bytes already there succeed, other bytes fail
        /// (PostgreSQL's archive_command contract).
        #[arg(long, conflicts_with = "series")]
        if_absent: bool,
    },
    /// Download PATH to FILE (through FILE.part), refusing bytes that do not match the SHA-256
    /// they were uploaded with.
    Get {
        #[command(flatten)]
        bucket: BucketArgs,
        #[arg(long)]
        file: PathBuf,
        /// PATH is a directory: download the object in it uploaded last at or before this time
        /// (RFC 3339).
        #[arg(long)]
        latest_before: Option<Timestamp>,
    },
    /// Copy this binary to TO, for a container of another image (PostgreSQL's archive_command
    /// and restore_command run it).
    Install {
        #[arg(long)]
        to: PathBuf,
    },
}

#[derive(clap::Args)]
struct BucketArgs {
    /// `<bucket>/<key>`.
    #[arg(long)]
    path: String,
    /// The directory the user's Secret is mounted at: the AWS shared files `credentials` and
    /// (optionally) `config`.
    #[arg(long)]
    credentials_dir: PathBuf,
    /// An S3-compatible store's URL (AWS S3 when unset).
    #[arg(long)]
    endpoint: Option<String>,
    /// Address the bucket in the path, not the host name.
    #[arg(long)]
    force_path_style: bool,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Path to a kubeconfig; in-cluster configuration or $KUBECONFIG when unset.
    #[arg(long, env = "APP_OPERATOR_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Address of the metrics endpoint (`:8443` for every interface, `127.0.0.1:8080`); `0`
    /// disables it. Loopback by default: plain HTTP is for this machine only, unless asked for
    /// (`--metrics-secure` serves it to others).
    #[arg(long, env = "APP_OPERATOR_METRICS_BIND_ADDRESS", default_value = "127.0.0.1:8080", value_parser = parse_address)]
    metrics_bind_address: Address,
    /// Serve /metrics over HTTPS, only to callers whose token passes a TokenReview and who may
    /// `get` the `/metrics` URL (SubjectAccessReview).
    #[arg(long, env = "APP_OPERATOR_METRICS_SECURE")]
    metrics_secure: bool,
    /// Directory with `tls.crt` and `tls.key` for --metrics-secure (self-signed when unset).
    #[arg(long, env = "APP_OPERATOR_METRICS_CERT_DIR")]
    metrics_cert_dir: Option<PathBuf>,
    /// Address of the /healthz and /readyz endpoints; `0` disables them.
    #[arg(long, env = "APP_OPERATOR_HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081", value_parser = parse_address)]
    health_probe_bind_address: Address,
    /// Watch only this namespace (all namespaces when empty).
    #[arg(long, env = "APP_OPERATOR_WATCH_NAMESPACE", default_value = "")]
    watch_namespace: String,
    /// The controllers to run.
    #[arg(long, env = "APP_OPERATOR_CONTROLLERS", value_delimiter = ',', value_enum, default_values_t = ControllerKind::ALL.to_vec())]
    controllers: Vec<ControllerKind>,
    /// How the EtcdCluster controller reaches etcd members: `cluster-dns` (`<pod>.<cluster>.<ns>.svc`,
    /// from inside the cluster) or `loopback` (each member on its own 127.x.y.z address, for a
    /// control plane whose Pods run on the operator's host, such as the local one with its etcd
    /// member runner).
    #[arg(long, env = "APP_OPERATOR_ETCD_MEMBER_ADDRESSING", value_enum, default_value_t = Addressing::ClusterDns)]
    etcd_member_addressing: Addressing,
    /// Resolve etcd members' names with this DNS server (the cluster's, e.g. 10.96.0.10) instead
    /// of the host's resolver: for an operator run outside the cluster (`make run`), which must
    /// still reach members by their cluster-DNS names. In the cluster leave it unset.
    #[arg(long, env = "APP_OPERATOR_ETCD_DNS_SERVER")]
    etcd_dns_server: Option<std::net::IpAddr>,
    /// The cluster domain `--etcd-dns-server` appends to member names, as a Pod's resolv.conf does.
    #[arg(
        long,
        env = "APP_OPERATOR_CLUSTER_DOMAIN",
        default_value = "cluster.local"
    )]
    cluster_domain: String,
    /// How many objects of one kind may be reconciled at once.
    #[arg(long, env = "APP_OPERATOR_MAX_CONCURRENT_RECONCILES", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    max_concurrent_reconciles: u16,
    /// Run the controllers only while holding a leader Lease (for more than one replica).
    #[arg(long, env = "APP_OPERATOR_LEADER_ELECT")]
    leader_elect: bool,
    /// Name of the leader election Lease.
    #[arg(
        long,
        env = "APP_OPERATOR_LEADER_ELECTION_ID",
        default_value = "app-operator.example.com"
    )]
    leader_election_id: String,
    /// Namespace of the leader election Lease (default: this Pod's namespace, else `default`).
    #[arg(long, env = "APP_OPERATOR_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// How long a leader's lease lasts unrenewed before a standby may take it (client-go's
    /// LeaseDuration).
    #[arg(long, env = "APP_OPERATOR_LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    leader_election_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down and exits (RenewDeadline).
    #[arg(long, env = "APP_OPERATOR_LEADER_ELECTION_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    leader_election_renew_deadline: Duration,
    /// How often candidates try for the lease and the leader renews it (RetryPeriod).
    #[arg(long, env = "APP_OPERATOR_LEADER_ELECTION_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    leader_election_retry_period: Duration,
    /// Timeout of every API request but watches: no answer within it fails the request, which is
    /// retried. The API server's own limit is 60 s.
    #[arg(long, env = "APP_OPERATOR_REQUEST_TIMEOUT", default_value = "70s", value_parser = parse_duration)]
    request_timeout: Duration,
    /// How long each watch runs before it is renewed; one silent for 5 s longer is taken for a
    /// dead connection and replaced.
    #[arg(long, env = "APP_OPERATOR_WATCH_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    watch_timeout: Duration,
    /// Log format.
    #[arg(long, env = "APP_OPERATOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log level or tracing filter (`info`, `debug`, `app_operator=debug,kube=info`).
    #[arg(long, env = "APP_OPERATOR_LOG_LEVEL", default_value = "info", value_parser = log_filter)]
    log_level: String,
    /// The image backup Jobs and restoring Pods run `app-operator object-store` from: this
    /// binary's own. In a Pod the operator reads it from its Pod when unset; outside one (`make
    /// run`) backups to a bucket wait until it is given.
    #[arg(long, env = "APP_OPERATOR_HELPER_IMAGE")]
    helper_image: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Json,
    Text,
}

/// A duration as Go and kubectl write them: `500ms`, `10s`, `2m`, `1m30s`, `1h`.
fn parse_duration(value: &str) -> Result<Duration, String> {
    let invalid = || format!("{value:?} is not a duration such as 500ms, 10s, 2m or 1m30s");
    let mut total = Duration::ZERO;
    let mut rest = value;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(invalid)?;
        let (number, after) = rest.split_at(digits);
        let number: u64 = number.parse().map_err(|_| invalid())?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let part = match unit {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number.saturating_mul(60)),
            "h" => Duration::from_secs(number.saturating_mul(3600)),
            _ => return Err(invalid()),
        };
        total = total.saturating_add(part);
        rest = after;
    }
    if total.is_zero() {
        return Err(invalid());
    }
    Ok(total)
}

/// A bind address, or disabled.
#[derive(Clone, Copy)]
struct Address(Option<SocketAddr>);

/// `:8080` means every interface, as in controller-runtime; `0` disables.
fn parse_address(value: &str) -> Result<Address, String> {
    if value == "0" {
        return Ok(Address(None));
    }
    let full = if value.starts_with(':') {
        format!("0.0.0.0{value}")
    } else {
        value.to_owned()
    };
    full.parse()
        .map(|a| Address(Some(a)))
        .map_err(|e| format!("{value:?} is not host:port or :port ({e})"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds => crds(),
        Command::Version => {
            println!("app-operator {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::ObjectStore(command) => object_store(command),
        Command::Run(args) => {
            init_logging(args.log_format, &args.log_level);
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(error) => return fail(&format!("cannot start the async runtime: {error}")),
            };
            match runtime.block_on(run(*args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(message) => fail(&message),
            }
        }
    }
}

/// Runs in a container: one line on success, one on failure (which the operator quotes in the
/// backup's status).
fn object_store(command: ObjectStoreCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fail(&format!("cannot start the async runtime: {error}")),
    };
    let target = |bucket: &BucketArgs| -> Result<s3::Target, s3::S3Error> {
        Ok(s3::Target {
            location: s3::Location::parse(&bucket.path)?,
            endpoint: bucket.endpoint.clone(),
            force_path_style: bucket.force_path_style,
            credentials: s3::Credentials::read(&bucket.credentials_dir)?,
        })
    };
    let done = runtime.block_on(async {
        match &command {
            ObjectStoreCommand::Put {
                bucket,
                file,
                series,
                keep,
                max_age_hours,
                if_absent,
            } => {
                let retention = series.clone().map(|series| s3::Retention {
                    series,
                    keep: keep.map(usize::from),
                    max_age: max_age_hours
                        .map(|hours| Duration::from_secs(u64::from(hours) * 3600)),
                });
                s3::put(&target(bucket)?, file, retention.as_ref(), *if_absent).await
            }
            ObjectStoreCommand::Get {
                bucket,
                file,
                latest_before,
            } => s3::get(&target(bucket)?, file, *latest_before).await,
            ObjectStoreCommand::Install { to } => s3::install(to),
        }
    });
    match done {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        // The container's last log line: its termination message (`FallbackToLogsOnError`).
        Err(error) => fail(&error.to_string()),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}

/// Every CRD as `make manifests` wrote it under `config/crd/bases/` (kept current by
/// `crates/manifests/tests/current.rs`), one YAML document each, in the order `api::crds()`
/// lists them. Embedded as text rather than generated: generating them took the schema builders
/// and a YAML writer into the binary, and every page of its code stays resident in the running
/// operator (docs/benchmarks.md, "Memory levers").
const CRDS: [&str; 6] = [
    include_str!("../../../config/crd/bases/example.com_myapps.yaml"),
    include_str!("../../../config/crd/bases/demo.demo.io_appclusters.yaml"),
    include_str!("../../../config/crd/bases/example.com_samples.yaml"),
    include_str!("../../../config/crd/bases/etcd.database.coreos.com_etcdclusters.yaml"),
    include_str!("../../../config/crd/bases/etcd.database.coreos.com_etcdbackups.yaml"),
    include_str!("../../../config/crd/bases/db.example.com_sampledbs.yaml"),
];

fn crds() -> ExitCode {
    print!("{}", CRDS.concat());
    ExitCode::SUCCESS
}

/// A `--log-level` that is not a tracing filter is refused at start, not silently replaced.
fn log_filter(level: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::try_new(level)
        .map(|_| level.to_owned())
        .map_err(|error| format!("not a log level or tracing filter: {error}"))
}

fn init_logging(format: LogFormat, level: &str) {
    // `level` passed `log_filter`.
    let filter = tracing_subscriber::EnvFilter::new(level);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

async fn run(args: RunArgs) -> Result<(), String> {
    let member_pods = MemberPods::default();
    let etcd_dns = MemberResolver::new(
        &match args.etcd_dns_server {
            Some(server) => MemberDns::Cluster {
                server,
                domain: args.cluster_domain.clone(),
            },
            None => MemberDns::System,
        },
        member_pods.clone(),
    )?;
    let options = Options {
        namespace: Some(args.watch_namespace).filter(|n| !n.is_empty()),
        controllers: args.controllers,
        concurrency: args.max_concurrent_reconciles,
        metrics_address: args.metrics_bind_address.0,
        health_address: args.health_probe_bind_address.0,
        metrics_secure: args.metrics_secure,
        metrics_cert_dir: args.metrics_cert_dir,
        leader_election: args.leader_elect.then(|| {
            let namespace = args
                .leader_election_namespace
                .unwrap_or_else(manager::own_namespace);
            LeaderElection {
                lease_duration: args.leader_election_lease_duration,
                renew_deadline: args.leader_election_renew_deadline,
                retry_period: args.leader_election_retry_period,
                ..LeaderElection::new(args.leader_election_id, namespace, manager::identity())
            }
        }),
        etcd_addressing: args.etcd_member_addressing,
        etcd_client: EtcdClient::gateway(etcd_dns),
        etcd_member_pods: member_pods,
        helper_image: args.helper_image,
        timeouts: Timeouts {
            request: args.request_timeout,
            watch: args.watch_timeout,
        },
    };
    if let Some(election) = &options.leader_election {
        election.check_timings()?;
    }
    let config = manager::connect(args.kubeconfig.as_deref()).await?;
    manager::run_until_signalled(config, options).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_durations_as_kubectl_writes_them() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for wrong in ["", "10", "s", "10x", "1.5s", "0s", "-1s"] {
            assert!(parse_duration(wrong).is_err(), "{wrong}");
        }
    }

    /// `--help` names every kind the binary serves.
    #[test]
    fn the_help_names_every_kind() {
        let about = <Cli as clap::CommandFactory>::command()
            .get_about()
            .map(ToString::to_string)
            .unwrap_or_default();
        for crd in app_operator::api::crds() {
            let kind = &crd.spec.names.kind;
            assert!(
                about.contains(kind.as_str()),
                "--help lacks {kind}: {about}"
            );
        }
    }

    /// Nothing is served in plain text beyond this machine unless asked for.
    #[test]
    fn metrics_are_served_on_loopback_only_by_default() {
        let Ok(Cli {
            command: Command::Run(args),
        }) = Cli::try_parse_from(["app-operator", "run"])
        else {
            panic!("`app-operator run` parses");
        };
        let address = args.metrics_bind_address.0.map(|a| a.to_string());
        assert_eq!(address.as_deref(), Some("127.0.0.1:8080"));
        assert!(!args.metrics_secure);
    }
}
