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
