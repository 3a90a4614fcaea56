//! Where a member lives on the network. Its peer URL is registered with etcd *before* its Pod
//! exists, so the address must follow from the Pod's name alone, and back: an added member whose
//! Pod was never created (the operator stopped in between) is found again from its peer URL.
//!
//! - [`Addressing::ClusterDns`] (production): `<pod>.<cluster>.<namespace>.svc`, the stable name
//!   the headless Service gives a Pod with `hostname`/`subdomain` set.
//! - [`Addressing::Loopback`] (a control plane whose Pods run nowhere, e.g. the local one, where the
//!   etcd member runner starts one process per Pod): each member gets its own `127.a.b.c`, and its
//!   Pod name encodes that address, so the mapping works both ways without DNS.

use std::net::Ipv4Addr;

pub const CLIENT_PORT: u16 = 2379;
pub const PEER_PORT: u16 = 2380;

/// The random part of a member's Pod name: `<cluster>-<10 characters>`, like a ReplicaSet's Pods.
pub const SUFFIX_LEN: usize = 10;

const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Addressing {
    #[default]
    ClusterDns,
    Loopback,
}

impl Addressing {
    /// The host name or address peers and clients reach the member at.
    pub fn host(self, cluster: &str, namespace: &str, pod: &str) -> String {
        match self {
            Addressing::ClusterDns => format!("{pod}.{cluster}.{namespace}.svc"),
            Addressing::Loopback => loopback_address(cluster, pod)
                .map_or_else(|| "127.0.0.1".to_owned(), |ip| ip.to_string()),
        }
    }

    /// The address the member's process listens on.
    pub fn listen_host(self, cluster: &str, namespace: &str, pod: &str) -> String {
        match self {
            Addressing::ClusterDns => "0.0.0.0".to_owned(),
            Addressing::Loopback => self.host(cluster, namespace, pod),
        }
    }

    /// The member's peer URL: `https` when peers speak TLS.
    pub fn peer_url(self, cluster: &str, namespace: &str, pod: &str, tls: bool) -> String {
        format!(
            "{}://{}:{PEER_PORT}",
            scheme(tls),
            self.host(cluster, namespace, pod)
        )
    }

    /// The member's client URL: `https` when clients speak TLS.
    pub fn client_url(self, cluster: &str, namespace: &str, pod: &str, tls: bool) -> String {
        format!(
            "{}://{}:{CLIENT_PORT}",
            scheme(tls),
            self.host(cluster, namespace, pod)
        )
    }

    /// The Pod name of the member registered with `peer_url` (either scheme), if it is one of
    /// this cluster's.
    pub fn pod_of_peer_url(self, cluster: &str, namespace: &str, peer_url: &str) -> Option<String> {
        let host = peer_url
            .strip_prefix("http://")
            .or_else(|| peer_url.strip_prefix("https://"))?
            .strip_suffix(&format!(":{PEER_PORT}"))?;
        match self {
            Addressing::ClusterDns => {
                let pod = host.strip_suffix(&format!(".{cluster}.{namespace}.svc"))?;
                is_member_pod_name(cluster, pod).then(|| pod.to_owned())
            }
            Addressing::Loopback => {
                let [127, a, b, c] = host.parse::<Ipv4Addr>().ok()?.octets() else {
                    return None;
                };
                let pod = loopback_pod_name(cluster, u32::from_be_bytes([0, a, b, c]));
                (loopback_address(cluster, &pod)?.to_string() == host).then_some(pod)
            }
        }
    }

    /// A fresh member Pod name; `entropy` supplies randomness (a test passes a fixed one).
    pub fn new_pod_name(self, cluster: &str, entropy: u64) -> String {
        match self {
            Addressing::ClusterDns => format!("{cluster}-{}", base36(entropy, SUFFIX_LEN)),
            Addressing::Loopback => {
                // 127.1.0.1 – 127.255.255.254: never 127.0.0.1, the network or broadcast address.
                let a = 1 + (entropy % 255) as u32;
                let b = ((entropy >> 8) % 256) as u32;
                let c = 1 + ((entropy >> 16) % 254) as u32;
                loopback_pod_name(cluster, (a << 16) | (b << 8) | c)
            }
        }
    }
}

/// `https` for TLS, else `http`.
pub fn scheme(tls: bool) -> &'static str {
    if tls { "https" } else { "http" }
}

/// Whether `pod` is named like one of `cluster`'s members.
pub fn is_member_pod_name(cluster: &str, pod: &str) -> bool {
    pod.strip_prefix(cluster)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|suffix| {
            suffix.len() == SUFFIX_LEN && suffix.bytes().all(|b| ALPHABET.contains(&b))
        })
}

/// `<cluster>-` + the address's 24 bits in 5 base-36 digits + 5 digits of a checksum over the
/// cluster name and address, so the name of a member at a given address is unique and stable.
fn loopback_pod_name(cluster: &str, address: u32) -> String {
    let check = fnv1a(cluster.as_bytes(), address) % 36u64.pow(5);
    format!(
        "{cluster}-{}{}",
        base36(u64::from(address), 5),
        base36(check, 5)
    )
}

/// The loopback address a loopback-named member Pod encodes.
fn loopback_address(cluster: &str, pod: &str) -> Option<Ipv4Addr> {
    let suffix = pod.strip_prefix(cluster)?.strip_prefix('-')?;
    let digits = suffix.get(..5)?;
    let address = u32::try_from(u64::from_str_radix(digits, 36).ok()?).ok()?;
    let [_, a, b, c] = address.to_be_bytes();
    (loopback_pod_name(cluster, address) == pod && a > 0).then_some(Ipv4Addr::new(127, a, b, c))
}

fn base36(mut value: u64, width: usize) -> String {
    let mut digits = vec![b'0'; width];
    for digit in digits.iter_mut().rev() {
        *digit = ALPHABET.get((value % 36) as usize).copied().unwrap_or(b'0');
        value /= 36;
    }
    String::from_utf8_lossy(&digits).into_owned()
}

/// FNV-1a: a hash that is the same in every build (std's hasher is not promised to be).
fn fnv1a(bytes: &[u8], salt: u32) -> u64 {
    bytes
        .iter()
        .copied()
        .chain(salt.to_be_bytes())
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_dns_names_round_trip_through_the_peer_url() {
        let dns = Addressing::ClusterDns;
        let pod = dns.new_pod_name("example", 0x1234_5678_9abc);
        assert!(is_member_pod_name("example", &pod), "{pod}");
        let url = dns.peer_url("example", "ns", &pod, false);
        assert_eq!(url, format!("http://{pod}.example.ns.svc:2380"));
        assert_eq!(
            dns.pod_of_peer_url("example", "ns", &url),
            Some(pod.clone())
        );
        let tls = dns.peer_url("example", "ns", &pod, true);
        assert_eq!(tls, format!("https://{pod}.example.ns.svc:2380"));
        assert_eq!(
            dns.pod_of_peer_url("example", "ns", &tls),
            Some(pod.clone())
        );
        assert_eq!(
            dns.client_url("example", "ns", &pod, true),
            format!("https://{pod}.example.ns.svc:2379")
        );
        assert_eq!(dns.pod_of_peer_url("other", "ns", &url), None);
        assert_eq!(dns.listen_host("example", "ns", &pod), "0.0.0.0");
    }

    #[test]
    fn loopback_names_encode_a_distinct_address_and_round_trip() {
        let lo = Addressing::Loopback;
        let mut seen = std::collections::HashSet::new();
        for entropy in [0u64, 1, 2, 1 << 8, 1 << 16, 0xdead_beef_cafe] {
            let pod = lo.new_pod_name("example", entropy);
            assert!(is_member_pod_name("example", &pod), "{pod}");
            let host = lo.host("example", "ns", &pod);
            let ip: Ipv4Addr = host.parse().unwrap();
            assert!(ip.is_loopback() && ip != Ipv4Addr::LOCALHOST, "{ip}");
            assert_ne!(ip.octets()[3], 255, "{ip}");
            assert!(seen.insert(host.clone()), "{host} twice");
            let url = lo.peer_url("example", "ns", &pod, false);
            assert_eq!(lo.pod_of_peer_url("example", "ns", &url), Some(pod));
        }
    }

    #[test]
    fn addresses_no_member_can_have_map_to_no_pod() {
        let lo = Addressing::Loopback;
        assert_eq!(
            lo.pod_of_peer_url("example", "ns", "http://127.0.0.1:2380"),
            None
        );
        assert_eq!(
            lo.pod_of_peer_url("example", "ns", "http://10.0.0.1:2380"),
            None
        );
    }
}
