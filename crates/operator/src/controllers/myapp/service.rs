use app_operator_api::MyApp;
use app_operator_api::myapp::ServiceType;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::labels::{child_metadata, selector_labels};

/// The Service of a MyApp: its port forwards to the container's named port `http`.
pub fn service(app: &MyApp, owner: OwnerReference) -> Service {
    let type_ = match app.spec.service_type {
        ServiceType::ClusterIP => "ClusterIP",
        ServiceType::NodePort => "NodePort",
        ServiceType::LoadBalancer => "LoadBalancer",
    };
    Service {
        metadata: child_metadata(app, owner),
        spec: Some(ServiceSpec {
            type_: Some(type_.into()),
            selector: Some(selector_labels(app)),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: app.spec.port,
                target_port: Some(IntOrString::String("http".into())),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Whether `actual` has other ports than `desired` (ignoring the allocated `nodePort`).
pub fn ports_drifted(desired: &Service, actual: &Service) -> bool {
    let key = |service: &Service| {
        let mut ports: Vec<_> = service
            .spec
            .iter()
            .flat_map(|s| s.ports.iter().flatten())
            .map(|p| {
                (
                    p.name.clone(),
                    p.port,
                    p.target_port.clone(),
                    p.protocol.clone(),
                )
            })
            .collect();
        ports.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        ports
    };
    key(desired) != key(actual)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::labels::tests::{full_app, minimal_app, owner};
    use super::*;

    #[test]
    fn minimal_service() {
        let app = minimal_app();
        insta::assert_yaml_snapshot!("minimal", service(&app, owner(&app)));
    }

    #[test]
    fn full_service() {
        let app = full_app();
        insta::assert_yaml_snapshot!("full", service(&app, owner(&app)));
    }

    #[test]
    fn the_service_type_is_the_apps() {
        for (service_type, expected) in [
            (ServiceType::ClusterIP, "ClusterIP"),
            (ServiceType::NodePort, "NodePort"),
            (ServiceType::LoadBalancer, "LoadBalancer"),
        ] {
            let mut app = minimal_app();
            app.spec.service_type = service_type;
            let type_ = service(&app, owner(&app)).spec.and_then(|s| s.type_);
            assert_eq!(type_.as_deref(), Some(expected), "{service_type:?}");
        }
    }

    #[test]
    fn the_service_selects_the_deployments_pods_on_their_named_port() {
        let app = full_app();
        let spec = service(&app, owner(&app)).spec.expect("a spec");
        let pod_labels = super::super::deployment(&app, owner(&app))
            .spec
            .and_then(|s| s.template.metadata)
            .and_then(|m| m.labels);
        assert_eq!(spec.selector, pod_labels);
        let ports = spec.ports.unwrap_or_default();
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].port, 9090);
        assert_eq!(
            ports[0].target_port,
            Some(IntOrString::String("http".into()))
        );
        // The API server allocates the node port.
        assert_eq!(ports[0].node_port, None);
    }

    /// The desired Service of the full app as the API server returns it: with what it defaults
    /// and allocates, then `edit` applied to its JSON.
    fn served(edit: impl FnOnce(&mut Value)) -> (Service, Service) {
        let app = full_app();
        let desired = service(&app, owner(&app));
        let mut actual = serde_json::to_value(&desired).expect("serializable");
        actual["metadata"]["uid"] = json!("00000000-0000-4000-8000-0000000000aa");
        actual["metadata"]["resourceVersion"] = json!("4711");
        actual["metadata"]["creationTimestamp"] = json!("2025-01-01T00:00:00Z");
        actual["metadata"]["managedFields"] = json!([{
            "manager": "app-operator", "operation": "Apply", "apiVersion": "v1",
            "fieldsType": "FieldsV1", "fieldsV1": {}
        }]);
        let spec = &mut actual["spec"];
        spec["clusterIP"] = json!("10.96.12.34");
        spec["clusterIPs"] = json!(["10.96.12.34"]);
        spec["ipFamilies"] = json!(["IPv4"]);
        spec["ipFamilyPolicy"] = json!("SingleStack");
        spec["sessionAffinity"] = json!("None");
        spec["externalTrafficPolicy"] = json!("Cluster");
        spec["internalTrafficPolicy"] = json!("Cluster");
        spec["ports"][0]["nodePort"] = json!(31234);
        actual["status"] = json!({ "loadBalancer": {} });
        edit(&mut actual);
        let actual = serde_json::from_value(actual).expect("a Service");
        (desired, actual)
    }

    #[test]
    fn server_defaulted_and_allocated_fields_are_not_drift() {
        let (desired, actual) = served(|_| {});
        assert!(!ports_drifted(&desired, &actual));
        assert!(!ports_drifted(&desired, &desired));
    }

    /// An edit of a served Service's JSON.
    type Edit = fn(&mut Value);

    #[test]
    fn edited_extra_or_missing_ports_are_drift() {
        let cases: [(&str, Edit); 7] = [
            ("port number edited", |s| {
                s["spec"]["ports"][0]["port"] = json!(80);
            }),
            ("target port edited to a number", |s| {
                s["spec"]["ports"][0]["targetPort"] = json!(9090);
            }),
            ("protocol edited", |s| {
                s["spec"]["ports"][0]["protocol"] = json!("UDP");
            }),
            ("port renamed", |s| {
                s["spec"]["ports"][0]["name"] = json!("web");
            }),
            ("extra port", |s| {
                let extra = json!({
                    "name": "metrics", "port": 9100, "targetPort": 9100,
                    "protocol": "TCP", "nodePort": 31235
                });
                s["spec"]["ports"]
                    .as_array_mut()
                    .expect("ports")
                    .push(extra);
            }),
            ("ports removed", |s| {
                s["spec"]["ports"] = json!([]);
            }),
            ("no spec", |s| {
                s.as_object_mut().expect("an object").remove("spec");
            }),
        ];
        for (case, edit) in cases {
            let (desired, actual) = served(edit);
            assert!(ports_drifted(&desired, &actual), "{case}");
        }
    }

    #[test]
    fn the_order_of_the_ports_is_not_drift() {
        let port = |name: &str, number: i32| ServicePort {
            name: Some(name.into()),
            port: number,
            protocol: Some("TCP".into()),
            ..ServicePort::default()
        };
        let with_ports = |ports: Vec<ServicePort>| Service {
            spec: Some(ServiceSpec {
                ports: Some(ports),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        };
        let desired = with_ports(vec![port("http", 80), port("metrics", 9100)]);
        let reordered = with_ports(vec![port("metrics", 9100), port("http", 80)]);
        assert!(!ports_drifted(&desired, &reordered));
        let one_edited = with_ports(vec![port("metrics", 9101), port("http", 80)]);
        assert!(ports_drifted(&desired, &one_edited));
    }
}
