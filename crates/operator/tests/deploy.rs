//! The two ways to deploy the operator, kustomize and Helm, render objects the API server
//! accepts (server-side dry run), with the security posture the issue asks for.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::Write;
use std::process::{Command, Stdio};

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

/// Server-side dry runs need the target namespace to exist.
fn ensure_namespace(name: &str) {
    if !testkit::kubectl(&["get", "namespace", name])
        .status
        .success()
    {
        kubectl_ok(&["create", "namespace", name]);
    }
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

fn helm(args: &[&str]) -> String {
    let output = Command::new(tools().bin("helm"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_helm_chart_lints_and_its_render_passes_a_server_side_dry_run() {
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/../../charts/app-operator");
    helm(&["lint", "--strict", chart]);
    ensure_namespace("app-operator-helm");
    let rendered = helm(&[
        "template",
        "demo",
        chart,
        "--namespace",
        "app-operator-helm",
        "--include-crds",
        "--set",
        "watchNamespace=apps",
    ]);
    for posture in POSTURE {
        assert!(rendered.contains(posture), "the chart lacks {posture}");
    }
    assert!(
        rendered.contains("--watch-namespace=apps"),
        "values are not applied"
    );
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
        .write_all(rendered.as_bytes())
        .unwrap();
    let output = apply.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let applied = String::from_utf8_lossy(&output.stdout);
    assert!(
        applied.contains("deployment.apps/demo-app-operator created (server dry run)"),
        "{applied}"
    );
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
fn can_i(user: &str, verb: &str, resource: &str, namespace: &str) -> String {
    let output = testkit::kubectl(&[
        "auth", "can-i", verb, resource, "-n", namespace, "--as", user,
    ]);
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The per-kind roles are aggregated into the built-in ones: a namespace's `edit` user may create
/// a MyApp (and the other kinds), a `view` user may read them but not create one.
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
    let resources = [
        "myapps.example.com",
        "appclusters.demo.demo.io",
        "samples.example.com",
        "etcdclusters.etcd.database.coreos.com",
        "etcdbackups.etcd.database.coreos.com",
        "sampledbs.db.example.com",
    ];
    // The controller manager aggregates the rules a moment after the roles exist.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let answers = loop {
        let answers: Vec<(String, String, String, String)> = resources
            .iter()
            .map(|resource| {
                (
                    resource.to_string(),
                    can_i("alice", "create", resource, &namespace),
                    can_i("bob", "create", resource, &namespace),
                    can_i("bob", "list", resource, &namespace),
                )
            })
            .collect();
        let expected = answers.iter().all(|(_, alice, bob_create, bob_list)| {
            (alice.as_str(), bob_create.as_str(), bob_list.as_str()) == ("yes", "no", "yes")
        });
        if expected || std::time::Instant::now() > deadline {
            break answers;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    kubectl_ok(&["delete", "namespace", &namespace, "--wait=false"]);
    for (resource, alice, bob_create, bob_list) in answers {
        assert_eq!(
            (alice.as_str(), bob_create.as_str(), bob_list.as_str()),
            ("yes", "no", "yes"),
            "{resource}: edit user create, view user create, view user list"
        );
    }
}
