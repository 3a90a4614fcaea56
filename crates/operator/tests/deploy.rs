//! The ways to deploy the operator (kustomize, the Helm chart, `make deploy`) render objects the
//! API server accepts, with the security posture, values and permissions they promise.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::Write;
use std::process::{Command, Stdio};

mod support;

use app_operator::api::MyApp;
use app_operator::manager::ControllerKind;
use k8s_openapi::api::apps::v1::Deployment;
use local_cluster::install::{self, Target, UserEnv};
use testkit::{kubectl_ok, tools};

const POSTURE: [&str; 9] = [
    "runAsNonRoot: true",
    "readOnlyRootFilesystem: true",
    "allowPrivilegeEscalation: false",
    "type: RuntimeDefault",
    "- ALL",
    "--leader-elect",
    "--metrics-secure",
    "terminationGracePeriodSeconds: 10",
    "podAntiAffinity",
];

/// Server-side dry runs need the target namespace to exist. Tests run in
/// parallel and two share a namespace, so "already exists" is success.
fn ensure_namespace(name: &str) {
    let created = testkit::kubectl(&["create", "namespace", name]);
    let stderr = String::from_utf8_lossy(&created.stderr);
    assert!(
        created.status.success() || stderr.contains("AlreadyExists"),
        "kubectl create namespace {name} failed: {stderr}"
    );
}

#[test]
fn the_kustomize_deployment_passes_a_server_side_dry_run() {
    ensure_namespace("app-operator-system");
    let default = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/default");
    let output = kubectl_ok(&["apply", "-k", default, "--dry-run=server"]);
    for object in [
        "deployment.apps/app-operator-controller-manager",
        "clusterrole.rbac.authorization.k8s.io/app-operator-manager-role",
        "serviceaccount/app-operator-controller-manager",
    ] {
        assert!(output.contains(object), "{object} missing from:\n{output}");
    }
    let rendered = kubectl_ok(&["kustomize", default]);
    for posture in POSTURE {
        assert!(rendered.contains(posture), "config/default lacks {posture}");
    }
}

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../charts/app-operator");

/// `helm` on the suite's control plane: its output, or what it said on failure.
fn try_helm(args: &[&str]) -> Result<String, String> {
    let output = Command::new(tools().bin("helm"))
        .args(args)
        .arg("--kubeconfig")
        .arg(testkit::kubeconfig())
        .output()
        .unwrap();
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

fn helm(args: &[&str]) -> String {
    try_helm(args).unwrap_or_else(|error| panic!("helm {}: {error}", args.join(" ")))
}

/// The chart rendered as release `demo` in `namespace`, with `--set` values.
fn render(namespace: &str, values: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["template", "demo", CHART, "--namespace", namespace];
    for value in values {
        args.extend(["--set", value]);
    }
    documents(&helm(&args))
}

/// The objects of a YAML stream (`helm template`, `kubectl kustomize`).
fn documents(yaml: &str) -> Vec<serde_json::Value> {
    serde_norway::Deserializer::from_str(yaml)
        .map(|document| serde::Deserialize::deserialize(document).unwrap())
        .filter(|object: &serde_json::Value| !object.is_null())
        .collect()
}

fn find<'a>(objects: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the render"))
}

/// `objects` through `kubectl apply --dry-run=server`, except Helm hooks (which exist only while
/// `helm test` runs, beside their own ServiceAccount).
fn server_dry_run(objects: &[&serde_json::Value]) -> String {
    let items: Vec<_> = objects
        .iter()
        .filter(|o| o["metadata"]["annotations"]["helm.sh/hook"].is_null())
        .collect();
    // JSON, not YAML: a YAML writer may leave `yes` unquoted, which kubectl reads as a bool.
    let stream =
        serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": items }).to_string();
    let mut apply = Command::new(tools().bin("kubectl"))
        .args(["apply", "--dry-run=server", "-f", "-"])
        .env("KUBECONFIG", testkit::kubeconfig())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    apply
        .stdin
        .take()
        .unwrap()
        .write_all(stream.as_bytes())
        .unwrap();
    let output = apply.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The defaults: the security posture, the image of the chart's appVersion (the operator's
/// version), Helm's labels, cluster-wide RBAC; every object passes a server-side dry run.
#[test]
fn the_helm_chart_lints_and_its_defaults_pass_a_server_side_dry_run() {
    helm(&["lint", "--strict", CHART]);
    ensure_namespace("app-operator-helm");
    let objects = render("app-operator-helm", &[]);
    let rendered = serde_norway::to_string(&objects).unwrap();
    for posture in POSTURE {
        assert!(rendered.contains(posture), "the chart lacks {posture}");
    }
    let deployment = find(&objects, "Deployment", "demo-app-operator");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        format!("app-operator:{}", env!("CARGO_PKG_VERSION")),
        "image.tag defaults to the appVersion, which is the operator's version"
    );
    assert_eq!(
        deployment["metadata"]["labels"]["helm.sh/chart"],
        "app-operator-0.1.0"
    );
    assert!(
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"].is_null(),
        "no fixed UID: the image's user, or the one the platform assigns"
    );
    let budget = find(&objects, "PodDisruptionBudget", "demo-app-operator");
    assert_eq!(budget["spec"]["minAvailable"], 1);
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert_crds_are_config_crds(&objects);
    find(&objects, "ClusterRole", "demo-app-operator-manager-role");
    assert!(
        !objects.iter().any(|o| o["kind"] == "NetworkPolicy"
            || o["apiVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("monitoring.coreos.com"))),
        "the optional objects are off by default"
    );
    let applied = server_dry_run(&objects.iter().collect::<Vec<_>>());
    assert!(
        applied.contains("deployment.apps/demo-app-operator created (server dry run)")
            && applied.contains("poddisruptionbudget.policy/demo-app-operator created")
            && applied.contains("customresourcedefinition.apiextensions.k8s.io/etcdclusters"),
        "{applied}"
    );
}

/// Every number in `value` as a float: Helm's templates read YAML numbers as floats (`1.0` and `1`
/// are one number to the API server).
fn numbers_as_floats(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Number(number) => {
            *value = serde_json::json!(number.as_f64().unwrap());
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(numbers_as_floats),
        serde_json::Value::Object(fields) => fields.values_mut().for_each(numbers_as_floats),
        _ => {}
    }
}

/// The chart's CRDs are config/crd/bases's, as templates (so `helm upgrade` upgrades them) with
/// Helm's labels and the annotation that keeps them through `helm uninstall`.
fn assert_crds_are_config_crds(objects: &[serde_json::Value]) {
    let bases = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/crd/bases");
    let mut files = 0;
    for entry in std::fs::read_dir(bases).unwrap() {
        let mut expected: serde_json::Value =
            serde_norway::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap())
                .unwrap();
        let name = expected["metadata"]["name"].as_str().unwrap().to_owned();
        let mut rendered = find(objects, "CustomResourceDefinition", &name).clone();
        assert_eq!(
            rendered["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "{name}"
        );
        assert_eq!(
            rendered["metadata"]["labels"]["app.kubernetes.io/managed-by"], "Helm",
            "{name}"
        );
        for object in [&mut expected, &mut rendered] {
            let metadata = object["metadata"].as_object_mut().unwrap();
            metadata.remove("labels");
            metadata.remove("annotations");
            numbers_as_floats(object);
        }
        assert_eq!(rendered, expected, "{name} differs from config/crd/bases");
        files += 1;
    }
    assert_eq!(
        objects
            .iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
            .count(),
        files
    );
}

/// Every knob lands where it should; the ServiceMonitor scrapes the metrics Service's port, the
/// PrometheusRule carries the alerts of config/prometheus, the NetworkPolicy opens the metrics
/// port; a misspelt value fails before anything is installed.
#[test]
fn the_helm_charts_values_are_applied_and_checked() {
    ensure_namespace("app-operator-helm");
    let objects = render(
        "app-operator-helm",
        &[
            "nameOverride=ops",
            "serviceAccount.name=robot",
            "serviceAccount.annotations.team=db",
            "image.tag=v7",
            "imagePullSecrets[0].name=registry",
            "podAnnotations.checked=yes",
            "podLabels.tier=control",
            "nodeSelector.pool=system",
            "tolerations[0].key=dedicated,tolerations[0].operator=Exists",
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
            "priorityClassName=system-cluster-critical",
            "watchNamespace=apps",
            "metrics.serviceMonitor.enabled=true",
            "metrics.serviceMonitor.labels.release=prom",
            "metrics.serviceMonitor.prometheusServiceAccount.name=prometheus",
            "metrics.serviceMonitor.prometheusServiceAccount.namespace=monitoring",
            "metrics.prometheusRule.enabled=true",
            "metrics.prometheusRule.runbookBaseURL=https://wiki.example/runbooks",
            "metrics.grafanaDashboard.enabled=true",
            "metrics.grafanaDashboard.namespace=monitoring",
            "networkPolicy.enabled=true",
            "leaderElection.leaseDuration=30s",
            "leaderElection.renewDeadline=20s",
            "leaderElection.retryPeriod=4s",
            "controllers={myapp,sampledb}",
            "maxConcurrentReconciles=3",
            "requestTimeout=30s",
            "watchTimeout=45s",
            "clusterDomain=corp.local",
            "healthProbePort=9091",
            "leaderElection.namespace=ops",
            "extraArgs[0]=--etcd-dns-server=10.96.0.10",
            "extraEnv[0].name=RUST_BACKTRACE,extraEnv[0].value=full",
            "podSecurityContext.runAsUser=1000740000",
            "securityContext.readOnlyRootFilesystem=false",
            "crds.create=false",
            "podDisruptionBudget.minAvailable=50%",
        ],
    );
    let deployment = find(&objects, "Deployment", "demo-ops");
    let pod = &deployment["spec"]["template"];
    assert_eq!(pod["metadata"]["annotations"]["checked"], "yes");
    assert_eq!(pod["metadata"]["labels"]["tier"], "control");
    let spec = &pod["spec"];
    assert_eq!(spec["serviceAccountName"], "robot");
    assert_eq!(spec["containers"][0]["image"], "app-operator:v7");
    assert_eq!(spec["imagePullSecrets"][0]["name"], "registry");
    assert_eq!(spec["nodeSelector"]["pool"], "system");
    assert_eq!(spec["tolerations"][0]["key"], "dedicated");
    assert_eq!(spec["priorityClassName"], "system-cluster-critical");
    assert!(spec["affinity"]["nodeAffinity"].is_object());
    assert!(
        spec["affinity"]["podAntiAffinity"].is_null(),
        "a given affinity replaces the default"
    );
    let manager = &spec["containers"][0];
    let args: Vec<&str> = manager["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    for arg in [
        "--leader-election-lease-duration=30s",
        "--leader-election-renew-deadline=20s",
        "--leader-election-retry-period=4s",
        "--controllers=myapp,sampledb",
        "--max-concurrent-reconciles=3",
        "--request-timeout=30s",
        "--watch-timeout=45s",
        "--cluster-domain=corp.local",
        "--health-probe-bind-address=:9091",
        "--leader-election-namespace=ops",
        "--etcd-dns-server=10.96.0.10",
    ] {
        assert!(args.contains(&arg), "{arg} not in {args:?}");
    }
    assert_eq!(manager["ports"][1]["containerPort"], 9091);
    assert!(
        manager["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "RUST_BACKTRACE" && e["value"] == "full")
    );
    assert_eq!(spec["securityContext"]["runAsUser"], 1_000_740_000_u64);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(manager["securityContext"]["readOnlyRootFilesystem"], false);
    assert_eq!(
        manager["securityContext"]["capabilities"]["drop"][0], "ALL",
        "a value replaces its key, the others stay"
    );
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "CustomResourceDefinition"),
        "crds.create=false"
    );
    assert_eq!(
        find(&objects, "PodDisruptionBudget", "demo-ops")["spec"]["minAvailable"],
        "50%"
    );
    let dashboard = find(&objects, "ConfigMap", "demo-ops-dashboard");
    assert_eq!(dashboard["metadata"]["namespace"], "monitoring");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: serde_json::Value =
        serde_json::from_str(dashboard["data"]["app-operator.json"].as_str().unwrap()).unwrap();
    let committed: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/grafana/dashboard.json"
        ))
        .unwrap(),
    )
    .unwrap();
    assert_eq!(json, committed, "the dashboard is config/grafana's");
    assert_eq!(
        find(&objects, "ServiceAccount", "robot")["metadata"]["annotations"]["team"],
        "db"
    );

    // Watching one namespace: a Role there, no cluster-wide grant of the manager's rules.
    let role = find(&objects, "Role", "demo-ops-manager-role");
    assert_eq!(role["metadata"]["namespace"], "apps");
    assert_eq!(
        find(&objects, "RoleBinding", "demo-ops-manager-rolebinding")["subjects"][0]["name"],
        "robot"
    );
    assert!(
        !objects
            .iter()
            .any(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "demo-ops-manager-role")
    );

    let service = find(&objects, "Service", "demo-ops-metrics");
    let monitor = find(&objects, "ServiceMonitor", "demo-ops");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prom");
    assert_eq!(
        monitor["spec"]["endpoints"][0]["port"],
        service["spec"]["ports"][0]["name"]
    );
    for (label, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(&service["metadata"]["labels"][label], value, "{label}");
    }
    let reader = find(
        &objects,
        "ClusterRoleBinding",
        "demo-ops-prometheus-metrics-reader",
    );
    assert_eq!(reader["subjects"][0]["name"], "prometheus");
    // config/prometheus's alerts, their runbooks where runbookBaseURL says.
    let alerts: serde_json::Value = serde_norway::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/prometheus/alerts.yaml"
        ))
        .unwrap()
        .replace(
            "https://github.com/app-operator/app-operator/blob/main/docs/runbooks.md",
            "https://wiki.example/runbooks",
        ),
    )
    .unwrap();
    let rule = find(&objects, "PrometheusRule", "demo-ops-alerts");
    assert_eq!(
        rule["spec"], alerts["spec"],
        "the chart's alerts are config/prometheus's"
    );
    assert!(
        rule["spec"]["groups"][0]["rules"][0]["annotations"]["runbook_url"]
            .as_str()
            .unwrap()
            .starts_with("https://wiki.example/runbooks#")
    );
    let policy = find(&objects, "NetworkPolicy", "demo-ops-metrics");
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], "metrics");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );

    // The Prometheus Operator's kinds need its CRDs; everything else passes a dry run.
    ensure_namespace("apps");
    ensure_namespace("monitoring");
    let core: Vec<_> = objects
        .iter()
        .filter(|o| o["apiVersion"] != "monitoring.coreos.com/v1")
        .collect();
    server_dry_run(&core);

    for (typo, says) in [
        ("imag.tag=v1", "additional properties 'imag' not allowed"),
        ("replicaCount=two", "/replicaCount"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("requestTimeout=soon", "/requestTimeout"),
        ("controllers={web}", "/controllers/0"),
        (
            "extraEnv[0].name=N,extraEnv[0].value=1",
            "/extraEnv/0/value",
        ),
    ] {
        let refused = try_helm(&["template", "demo", CHART, "--set", typo])
            .expect_err(&format!("{typo} was accepted"));
        assert!(refused.contains(says), "{typo}: {refused}");
    }
}

/// The one object of `kind` in `objects`.
fn only<'a>(objects: &'a [serde_json::Value], kind: &str) -> &'a serde_json::Value {
    let mut found = objects.iter().filter(|o| o["kind"] == kind);
    let first = found
        .next()
        .unwrap_or_else(|| panic!("no {kind} in the render"));
    assert!(found.next().is_none(), "more than one {kind}");
    first
}

/// A render that serves /metrics with a cert-manager certificate: the Certificate is for the
/// metrics Service's name and issued by the render's Issuer (unless `own_issuer`), its Secret is
/// mounted where the manager reads its certificate, and the ServiceMonitor verifies the serving
/// certificate (its CA, its name) instead of skipping verification.
fn assert_metrics_certificate_used(objects: &[serde_json::Value], own_issuer: bool) {
    let certificate = &only(objects, "Certificate")["spec"];
    let service = objects
        .iter()
        .find(|o| {
            o["kind"] == "Service" && o["metadata"]["name"].as_str().unwrap().contains("metrics")
        })
        .expect("the metrics Service");
    let server_name = format!(
        "{}.{}.svc",
        service["metadata"]["name"].as_str().unwrap(),
        service["metadata"]["namespace"].as_str().unwrap()
    );
    assert_eq!(certificate["dnsNames"][0], server_name.as_str());
    if !own_issuer {
        let issuer = only(objects, "Issuer");
        assert_eq!(certificate["issuerRef"]["name"], issuer["metadata"]["name"]);
        assert_eq!(certificate["issuerRef"]["kind"], "Issuer");
    }
    let secret = &certificate["secretName"];

    let pod = &only(objects, "Deployment")["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| &v["secret"]["secretName"] == secret)
        .expect("the certificate's Secret is a volume");
    let manager = &pod["containers"][0];
    let mount = manager["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("mounted in the manager");
    let cert_dir = format!(
        "--metrics-cert-dir={}",
        mount["mountPath"].as_str().unwrap()
    );
    let args = manager["args"].as_array().unwrap();
    assert!(args.iter().any(|a| *a == cert_dir.as_str()), "{args:?}");

    let tls = &only(objects, "ServiceMonitor")["spec"]["endpoints"][0]["tlsConfig"];
    assert_eq!(&tls["ca"]["secret"]["name"], secret);
    assert_eq!(tls["ca"]["secret"]["key"], "ca.crt");
    assert_eq!(tls["serverName"], server_name.as_str());
    assert!(tls["insecureSkipVerify"].is_null(), "{tls}");
}

/// The oldest Kubernetes minor `make test` runs against (local_cluster's `Kubernetes::Oldest`) is
/// the one the chart's `kubeVersion` and the README's table claim.
#[test]
fn the_chart_and_readme_claim_the_versions_make_test_runs() {
    let oldest = local_cluster::Kubernetes::OLDEST_MINOR;
    let chart = std::fs::read_to_string(format!("{CHART}/Chart.yaml")).unwrap();
    assert!(
        chart.contains(&format!("\nkubeVersion: \">= {oldest}.0-0\"\n")),
        "{chart}"
    );
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    assert!(
        readme.contains(&format!("\n| {oldest} | ")),
        "no row for {oldest}"
    );
    let refused = try_helm(&["template", "demo", CHART, "--kube-version", "1.33.5"])
        .expect_err("the chart installed on Kubernetes 1.33");
    assert!(refused.contains("kubeVersion"), "{refused}");
}

/// Every flag of `app-operator run` is set from a chart value, but those only an operator outside
/// the cluster needs (`extraArgs` passes any): a flag added without a value fails here.
#[test]
fn every_flag_of_the_operator_is_a_chart_value() {
    const OUTSIDE_THE_CLUSTER: [&str; 4] = [
        "--kubeconfig",
        "--etcd-member-addressing",
        "--etcd-dns-server",
        "--help",
    ];
    let help = Command::new(env!("CARGO_BIN_EXE_app-operator"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let flags: Vec<String> = String::from_utf8(help.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("--"))
        .filter_map(|line| line.split([' ', '=']).next())
        .map(|flag| format!("--{flag}"))
        .filter(|flag| !OUTSIDE_THE_CLUSTER.contains(&flag.as_str()))
        .collect();
    assert!(flags.len() > 15, "{flags:?}");
    let objects = render(
        "app-operator-helm",
        &[
            "controllers={myapp}",
            "metrics.certSecret=metrics-tls",
            "leaderElection.namespace=ops",
        ],
    );
    let args = &only(&objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"];
    let args: Vec<&str> = args
        .as_array()
        .unwrap()
        .iter()
        .map(|arg| arg.as_str().unwrap())
        .collect();
    for flag in &flags {
        assert!(
            args.iter()
                .any(|arg| arg == flag || arg.starts_with(&format!("{flag}="))),
            "no chart value sets {flag}: {args:?}"
        );
    }
}

/// `metrics.certSecret`: a certificate of the user's own, mounted where the manager reads it, and
/// no cert-manager objects; with plain HTTP or beside certManager it is refused.
#[test]
fn the_helm_charts_metrics_certificate_may_be_a_secret_of_the_users() {
    let objects = render("app-operator-helm", &["metrics.certSecret=metrics-tls"]);
    let pod = &only(&objects, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "metrics-tls");
    let mount = &pod["containers"][0]["volumeMounts"][0];
    assert_eq!(mount["name"], pod["volumes"][0]["name"]);
    let cert_dir = format!(
        "--metrics-cert-dir={}",
        mount["mountPath"].as_str().unwrap()
    );
    assert!(
        pod["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|arg| *arg == cert_dir.as_str())
    );
    assert!(!objects.iter().any(|o| o["kind"] == "Certificate"));
    for (values, says) in [
        (
            "metrics.certSecret=metrics-tls,metrics.secure=false",
            "needs metrics.secure",
        ),
        (
            "metrics.certSecret=metrics-tls,metrics.certManager.enabled=true",
            "give one certificate",
        ),
    ] {
        let refused = try_helm(&["template", "demo", CHART, "--set", values])
            .expect_err(&format!("{values} was accepted"));
        assert!(refused.contains(says), "{values}: {refused}");
    }
}

/// `metrics.certManager`: the certificate is used and verified; an issuer of the user's
/// replaces the chart's self-signed one; plain HTTP with a certificate is refused. Without it
/// the ServiceMonitor cannot verify the self-signed certificate, and says so by skipping.
#[test]
fn the_helm_charts_metrics_certificate_is_mounted_and_verified() {
    let monitored = "metrics.serviceMonitor.enabled=true";
    let skipping = render("app-operator-helm", &[monitored]);
    let tls = &only(&skipping, "ServiceMonitor")["spec"]["endpoints"][0]["tlsConfig"];
    assert_eq!(tls["insecureSkipVerify"], true, "without a certificate");

    let certified = "metrics.certManager.enabled=true";
    let objects = render("app-operator-helm", &[monitored, certified]);
    assert_metrics_certificate_used(&objects, false);
    // cert-manager's and the Prometheus Operator's kinds need their CRDs; the rest (the
    // Deployment's volume) passes a dry run.
    ensure_namespace("app-operator-helm");
    let core: Vec<_> = objects
        .iter()
        .filter(|o| {
            let api = o["apiVersion"].as_str().unwrap_or_default();
            !api.starts_with("cert-manager.io/") && !api.starts_with("monitoring.coreos.com/")
        })
        .collect();
    server_dry_run(&core);

    let issued = render(
        "app-operator-helm",
        &[
            monitored,
            certified,
            "metrics.certManager.issuerRef.kind=ClusterIssuer",
            "metrics.certManager.issuerRef.name=company-ca",
        ],
    );
    assert_metrics_certificate_used(&issued, true);
    let issuer = &only(&issued, "Certificate")["spec"]["issuerRef"];
    assert_eq!(issuer["name"], "company-ca");
    assert_eq!(issuer["kind"], "ClusterIssuer");
    assert!(!issued.iter().any(|o| o["kind"] == "Issuer"));

    let refused = try_helm(&[
        "template",
        "demo",
        CHART,
        "--set",
        "metrics.certManager.enabled=true,metrics.secure=false",
    ])
    .expect_err("a certificate for plain HTTP was accepted");
    assert!(refused.contains("needs metrics.secure"), "{refused}");
}

/// config/default's [PROMETHEUS] and [CERTMANAGER] lines uncommented, as its comments tell users
/// to: the certificate (config/certmanager) is used and verified under config/default's names.
#[test]
fn the_kustomize_certmanager_option_mounts_and_verifies_the_metrics_certificate() {
    let scratch = std::env::temp_dir().join(format!("certmanager-{}", std::process::id()));
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config");
    local_cluster::copy_dir(std::path::Path::new(config), &scratch.join("config")).unwrap();
    let kustomization = scratch.join("config/default/kustomization.yaml");
    let uncommented: String = std::fs::read_to_string(&kustomization)
        .unwrap()
        .lines()
        .map(|line| match line.strip_prefix('#') {
            Some(rest)
                if rest.starts_with("- ../")
                    || rest.starts_with("patches:")
                    || rest.starts_with("- path: ")
                    || rest.starts_with("  ") =>
            {
                format!("{rest}\n")
            }
            _ => format!("{line}\n"),
        })
        .collect();
    assert!(uncommented.contains("- ../certmanager\n"), "{uncommented}");
    std::fs::write(&kustomization, uncommented).unwrap();
    let rendered = kubectl_ok(&[
        "kustomize",
        &scratch.join("config/default").to_string_lossy(),
    ]);
    std::fs::remove_dir_all(&scratch).unwrap();
    assert_metrics_certificate_used(&documents(&rendered), false);
}

/// `helm install` watching one namespace: the notes say how to check it and about CRD upgrades,
/// the `helm test` hook is registered, and the operator running as the chart's ServiceAccount
/// with only the namespaced Role syncs every controller and reconciles a MyApp there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helm_release_watching_one_namespace_runs_on_its_namespaced_role() {
    let watched = testkit::TestNamespace::new("helm-watched").await;
    support::install_crds().await;
    let release = HelmRelease::install(
        &format!("scoped-{}", std::process::id()),
        // The suite installed the CRDs (kubectl apply), so they are not the release's.
        &[
            &format!("watchNamespace={}", watched.name),
            "crds.create=false",
        ],
    );
    let hooks = helm(&[
        "get",
        "hooks",
        &release.name,
        "--namespace",
        &release.namespace,
    ]);
    let account = format!("{}-app-operator", release.name);
    let operator = support::start_as(
        &watched.name,
        ControllerKind::ALL,
        &release.namespace,
        &account,
    )
    .await;
    let apps = watched.api::<MyApp>();
    apps.create(
        &kube::api::PostParams::default(),
        &testkit::object(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "MyApp",
            "metadata": { "name": "web" },
            "spec": { "image": "nginx:1.27", "port": 80 }
        })),
    )
    .await
    .unwrap();
    let deployments = watched.api::<Deployment>();
    let child = testkit::eventually(support::TIMEOUT, "MyApp web's Deployment", || async {
        deployments.get("web").await.ok()
    })
    .await;
    drop(operator);

    assert!(
        release
            .notes
            .contains(&format!("rollout status deployment/{account}"))
            && release
                .notes
                .contains("CRDs: not managed by this release (crds.create=false)"),
        "{}",
        release.notes
    );
    assert!(
        hooks.contains("helm.sh/hook: test")
            && hooks.contains(&format!("name: {account}-test-metrics")),
        "{hooks}"
    );
    assert_eq!(
        child.metadata.owner_references.unwrap_or_default()[0].name,
        "web"
    );
}

/// A release of the chart in a namespace of its own, uninstalled (with the namespace) when dropped,
/// also when the test fails.
struct HelmRelease {
    name: String,
    namespace: String,
    /// What `helm install` printed: the chart's NOTES.
    notes: String,
}

impl HelmRelease {
    fn install(name: &str, values: &[&str]) -> HelmRelease {
        let namespace = format!("{name}-release");
        let mut args = vec![
            "install",
            name,
            CHART,
            "--namespace",
            &namespace,
            "--create-namespace",
        ];
        for value in values {
            args.extend(["--set", value]);
        }
        let notes = helm(&args);
        HelmRelease {
            name: name.to_owned(),
            namespace,
            notes,
        }
    }
}

impl Drop for HelmRelease {
    fn drop(&mut self) {
        let uninstalled = try_helm(&["uninstall", &self.name, "--namespace", &self.namespace]);
        testkit::kubectl(&["delete", "namespace", &self.namespace, "--wait=false"]);
        if let Err(error) = uninstalled
            && !std::thread::panicking()
        {
            panic!("helm uninstall {}: {error}", self.name);
        }
    }
}

/// `KUBECONFIG=<another cluster> IMG=<image> make deploy` deploys there, with that image, and
/// leaves the suite's own control plane alone; `make build-installer` renders the same objects.
#[test]
fn deploy_acts_on_the_cluster_of_kubeconfig_with_the_image_of_img() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let state =
        local_cluster::repo_root().join(format!("target/deploy-test-{}", std::process::id()));
    let layout = local_cluster::Layout {
        state_dir: state.join("cluster"),
    };
    let other = runtime
        .block_on(local_cluster::Cluster::up(
            &layout,
            tools(),
            &local_cluster::ClusterOptions::default(),
        ))
        .unwrap();
    let img = "registry.example:5000/team/app-operator:v9";
    let user = UserEnv {
        kubeconfig: Some(other.kubeconfig.clone().into_os_string()),
        img: Some(img.into()),
        ..UserEnv::default()
    };
    let target = Target::resolve(&user, &local_cluster::Layout::default(), || {
        Ok(tools().clone())
    })
    .unwrap();
    let repo = local_cluster::repo_root();
    let work = state.join("deploy");
    let described = target.describe().unwrap();
    let deployed = install::deploy(&target, &repo, &work);
    let installer = install::installer(&target, &repo, &work);
    let in_other = target.run(&[
        "get",
        "deployment",
        "-n",
        "app-operator-system",
        "app-operator-controller-manager",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].imagePullPolicy}",
    ]);
    let kubeconfig = std::fs::read_to_string(&other.kubeconfig).unwrap();
    local_cluster::Cluster::down(&layout).unwrap();
    std::fs::remove_dir_all(&state).unwrap();

    let server = kubeconfig
        .lines()
        .find_map(|line| line.trim().strip_prefix("server: "))
        .unwrap();
    assert!(described.contains(server), "{described} is not {server}");
    let deployed = deployed.unwrap();
    assert!(
        deployed.contains("deployment.apps/app-operator-controller-manager serverside-applied"),
        "{deployed}"
    );
    assert_eq!(in_other.unwrap(), format!("{img} IfNotPresent"));
    let untouched = testkit::kubectl(&[
        "get",
        "deployment",
        "-n",
        "app-operator-system",
        "app-operator-controller-manager",
    ]);
    assert!(
        !untouched.status.success(),
        "the suite's control plane got the Deployment too"
    );
    let installer = installer.unwrap();
    assert!(
        installer.contains(&format!("image: {img}"))
            && installer.contains("kind: CustomResourceDefinition"),
        "dist/install.yaml would lack the image or the CRDs"
    );
}

/// `kubectl auth can-i` for `user` in `namespace`: `yes` or `no`.
/// `kubectl auth can-i`'s answer for `user` (on the `scale` subresource if `scale`).
fn can_i(user: &str, verb: &str, resource: &str, scale: bool, namespace: &str) -> String {
    let mut args = vec![
        "auth", "can-i", verb, resource, "-n", namespace, "--as", user,
    ];
    if scale {
        args.push("--subresource=scale");
    }
    let output = testkit::kubectl(&args);
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The per-kind roles are aggregated into the built-in ones: a namespace's `edit` user may create
/// a MyApp (and the other kinds) and `kubectl scale` the kinds that scale; a `view` user may read
/// them (and their scale) but not create or scale one.
#[test]
fn namespace_edit_users_create_the_operators_kinds_and_view_users_only_read_them() {
    let roles = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/rbac/user_roles.yaml"
    );
    kubectl_ok(&["apply", "--server-side", "-f", roles]);
    let namespace = format!("user-roles-{}", std::process::id());
    kubectl_ok(&["create", "namespace", &namespace]);
    for (role, user) in [("edit", "alice"), ("view", "bob")] {
        kubectl_ok(&[
            "create",
            "rolebinding",
            user,
            "--clusterrole",
            role,
            "--user",
            user,
            "-n",
            &namespace,
        ]);
    }
    // (resource, whether it has the scale subresource)
    let resources = [
        ("myapps.example.com", true),
        ("appclusters.demo.demo.io", true),
        ("samples.example.com", false),
        ("etcdclusters.etcd.database.coreos.com", true),
        ("etcdbackups.etcd.database.coreos.com", false),
        ("sampledbs.db.example.com", false),
    ];
    // (user, verb, on the scale subresource, the answer wanted)
    let asks = |scales: bool| {
        let mut asks = vec![
            ("alice", "create", false, "yes"),
            ("bob", "create", false, "no"),
            ("bob", "list", false, "yes"),
        ];
        if scales {
            asks.extend([
                ("alice", "patch", true, "yes"),
                ("bob", "get", true, "yes"),
                ("bob", "patch", true, "no"),
            ]);
        }
        asks
    };
    let answer = |(user, verb, scale, _): &(&str, &str, bool, &str), resource: &str| {
        can_i(user, verb, resource, *scale, &namespace)
    };
    // The controller manager aggregates the rules a moment after the roles exist.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let wrong = loop {
        let wrong: Vec<String> = resources
            .iter()
            .flat_map(|(resource, scales)| {
                asks(*scales).into_iter().filter_map(move |ask| {
                    let got = answer(&ask, resource);
                    let (user, verb, scale, wanted) = ask;
                    let what = if scale { "/scale" } else { "" };
                    (got != wanted)
                        .then(|| format!("{user} {verb} {resource}{what}: {got}, not {wanted}"))
                })
            })
            .collect();
        if wrong.is_empty() || std::time::Instant::now() > deadline {
            break wrong;
        }
        // Between asks, under the deadline above; the assert below reads the last answers.
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    kubectl_ok(&["delete", "namespace", &namespace, "--wait=false"]);
    assert!(wrong.is_empty(), "{wrong:#?}");
}
