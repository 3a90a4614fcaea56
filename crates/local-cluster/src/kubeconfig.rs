use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::pki::CertifiedKey;

/// A kubeconfig with embedded credentials for one client certificate.
pub fn render(server: &str, ca_pem: &str, user: &str, client: &CertifiedKey) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: app-operator-local
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: app-operator-local
  context:
    cluster: app-operator-local
    user: {user}
    namespace: default
current-context: app-operator-local
",
        ca = STANDARD.encode(ca_pem),
        cert = STANDARD.encode(&client.cert_pem),
        key = STANDARD.encode(&client.key_pem),
    )
}
