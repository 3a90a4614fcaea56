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
    pub apiserver: CertifiedKey,
    pub clients: Vec<(ClientIdentity, CertifiedKey)>,
    /// Signs service-account tokens (kube-apiserver, kube-controller-manager).
    pub service_account_key_pem: String,
    /// Verifies them (kube-apiserver).
    pub service_account_public_pem: String,
}

pub fn generate(clients: Vec<ClientIdentity>) -> Result<Pki, rcgen::Error> {
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

    let apiserver = leaf(
        &issuer,
        "kube-apiserver",
        None,
        &[
            "127.0.0.1",
            "10.96.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
        ExtendedKeyUsagePurpose::ServerAuth,
    )?;
    let clients = clients
        .into_iter()
        .map(|identity| {
            let key = leaf(
                &issuer,
                identity.user,
                identity.group,
                &[],
                ExtendedKeyUsagePurpose::ClientAuth,
            )?;
            Ok((identity, key))
        })
        .collect::<Result<_, rcgen::Error>>()?;
    let service_account = KeyPair::generate()?;
    Ok(Pki {
        ca,
        apiserver,
        clients,
        service_account_key_pem: service_account.serialize_pem(),
        service_account_public_pem: service_account.public_key_pem(),
    })
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
