//! The control plane's certificates: one CA, the API server's serving certificate, client
//! certificates for each identity, and the service-account token signing key.

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A PEM certificate and its PEM private key.
pub struct CertifiedKey {
    pub cert_pem: String,
    pub key_pem: String,
}

/// A client identity: the certificate's CN is the user, its O the group.
pub struct ClientIdentity {
    pub file_stem: &'static str,
    pub user: &'static str,
    pub group: Option<&'static str>,
}

pub struct Pki {
    pub ca: CertifiedKey,
    /// Signs the certificates made after [`generate`] (the real node's).
    issuer: Issuer<'static, KeyPair>,
    pub apiserver: CertifiedKey,
    pub clients: Vec<(ClientIdentity, CertifiedKey)>,
    /// Signs service-account tokens (kube-apiserver, kube-controller-manager).
    pub service_account_key_pem: String,
    /// Verifies them (kube-apiserver).
    pub service_account_public_pem: String,
}

/// The CA and the control plane's certificates; `apiserver_addresses` are added to the API
/// server's names (a real node's Pods reach it at the node's address).
pub fn generate(
    clients: Vec<ClientIdentity>,
    apiserver_addresses: &[String],
) -> Result<Pki, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "app-operator local CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca = CertifiedKey {
        cert_pem: ca_cert.pem(),
        key_pem: ca_key.serialize_pem(),
    };
    let issuer = Issuer::new(ca_params, ca_key);

    let mut apiserver_names: Vec<&str> = vec![
        "127.0.0.1",
        "10.96.0.1",
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ];
    apiserver_names.extend(apiserver_addresses.iter().map(String::as_str));
    let apiserver = leaf(
        &issuer,
        "kube-apiserver",
        None,
        &apiserver_names,
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let clients = clients
        .into_iter()
        .map(|identity| {
            let key = client(&issuer, &identity)?;
            Ok((identity, key))
        })
        .collect::<Result<_, rcgen::Error>>()?;
    let service_account = KeyPair::generate()?;
    Ok(Pki {
        ca,
        issuer,
        apiserver,
        clients,
        service_account_key_pem: service_account.serialize_pem(),
        service_account_public_pem: service_account.public_key_pem(),
    })
}

impl Pki {
    /// A client certificate for `identity`, signed by the CA.
    pub fn client(&self, identity: &ClientIdentity) -> Result<CertifiedKey, rcgen::Error> {
        client(&self.issuer, identity)
    }

    /// A serving certificate for `names` (DNS names or IP addresses), signed by the CA.
    pub fn server(&self, common_name: &str, names: &[&str]) -> Result<CertifiedKey, rcgen::Error> {
        leaf(
            &self.issuer,
            common_name,
            None,
            names,
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }
}

fn client(
    issuer: &Issuer<'_, KeyPair>,
    identity: &ClientIdentity,
) -> Result<CertifiedKey, rcgen::Error> {
    leaf(
        issuer,
        identity.user,
        identity.group,
        &[],
        ExtendedKeyUsagePurpose::ClientAuth,
    )
}

fn leaf(
    issuer: &Issuer<'_, KeyPair>,
    common_name: &str,
    organization: Option<&str>,
    subject_alt_names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> Result<CertifiedKey, rcgen::Error> {
    let key = KeyPair::generate()?;
    let names: Vec<String> = subject_alt_names.iter().map(|s| (*s).to_owned()).collect();
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    if let Some(organization) = organization {
        params
            .distinguished_name
            .push(DnType::OrganizationName, organization);
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    let cert = params.signed_by(&key, issuer)?;
    Ok(CertifiedKey {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}
