//! How the etcd client turns a member's host name into addresses. In the cluster, the Pod's own
//! resolver (cluster DNS) does it. An operator run outside the cluster (`make run`, a debugger)
//! cannot resolve `<pod>.<cluster>.<namespace>.svc` with the host's resolver, so
//! `--etcd-dns-server` asks the cluster's DNS directly, with the cluster domain as the search
//! domain, exactly as a Pod's resolv.conf would: the product keeps its production addressing.
//!
//! Either way, a member's own name is first looked up among the member Pods the operator watches
//! ([`MemberPods`]), and DNS is never asked for a member whose Pod has no address yet: cluster
//! DNS caches a name that does not exist yet for 30 s (CoreDNS's `cache 30` and the `kubernetes`
//! plugin's `ttl 30`, kubeadm's defaults), for every client. Asking it for a member whose Pod had
//! just been created held each new cluster's first member out of reach of the operator, and of
//! the members joining it, for that long (`make bench-stateful`, an EtcdCluster 0 -> 3: 100 s by
//! the operator, 70 s by hand; 69 s since).

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::Name as DnsName;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use tower_service::Service;

use crate::controllers::etcdcluster::CLUSTER_LABEL;

/// Where member names are resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MemberDns {
    /// The resolver of the machine or Pod the operator runs in.
    #[default]
    System,
    /// A cluster DNS server (its address) and the cluster domain, for names without it.
    Cluster { server: IpAddr, domain: String },
}

/// The member Pods the EtcdCluster controller watches, once its cache exists: the API server's
/// current answer for where each member is.
#[derive(Clone, Debug, Default)]
pub struct MemberPods(Arc<OnceLock<Store<Pod>>>);

impl MemberPods {
    /// Resolves members' names from `pods` from now on (the first store given is kept).
    pub fn watch(&self, pods: Store<Pod>) {
        let _ = self.0.set(pods);
    }

    /// Where the member `host` names (`<pod>.<cluster>.<namespace>.svc`, with or without the
    /// cluster domain) is, if it is the name of a member Pod this cache holds.
    pub fn lookup(&self, host: &str) -> Lookup {
        self.member_pod(host).map_or(Lookup::NotAMember, |pod| {
            pod.status
                .as_ref()
                .and_then(|s| s.pod_ip.as_deref()?.parse().ok())
                .map_or(Lookup::NoAddressYet, Lookup::Address)
        })
    }

    fn member_pod(&self, host: &str) -> Option<Arc<Pod>> {
        let mut labels = host.split('.');
        let (pod, cluster, namespace) = (labels.next()?, labels.next()?, labels.next()?);
        if labels.next()? != "svc" {
            return None;
        }
        let found = self.0.get()?.get(&ObjectRef::new(pod).within(namespace))?;
        (found.labels().get(CLUSTER_LABEL).map(String::as_str) == Some(cluster)).then_some(found)
    }
}

/// What [`MemberPods`] knows of a name.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    Address(IpAddr),
    /// The member's Pod has no address yet: its process cannot be running, and asking DNS now
    /// would leave "no such name" in its cache for 30 s, where the other members would find it.
    NoAddressYet,
    /// Not a member Pod's name: DNS answers it.
    NotAMember,
}

/// The resolver [`super::EtcdGateway`]'s connector uses: [`MemberPods`] first, then DNS.
#[derive(Clone, Default)]
pub struct MemberResolver {
    pods: MemberPods,
    dns: Dns,
}

#[derive(Clone)]
enum Dns {
    System(GaiResolver),
    Cluster(Arc<TokioResolver>),
}

impl Default for Dns {
    fn default() -> Self {
        Dns::System(GaiResolver::new())
    }
}

impl MemberResolver {
    pub fn new(dns: &MemberDns, pods: MemberPods) -> Result<MemberResolver, String> {
        let dns = match dns {
            MemberDns::System => Dns::default(),
            MemberDns::Cluster { server, domain } => {
                let domain = DnsName::from_utf8(domain)
                    .map_err(|e| format!("cluster domain {domain:?}: {e}"))?;
                let config = ResolverConfig::from_parts(
                    Some(domain.clone()),
                    vec![domain],
                    vec![NameServerConfig::udp_and_tcp(*server)],
                );
                let mut options = ResolverOpts::default();
                // A Pod's resolv.conf says ndots:5: `a.b.ns.svc` is tried with the domain first.
                options.ndots = 5;
                let resolver =
                    TokioResolver::builder_with_config(config, TokioRuntimeProvider::default())
                        .with_options(options)
                        .build()
                        .map_err(|e| format!("cluster DNS resolver: {e}"))?;
                Dns::Cluster(Arc::new(resolver))
            }
        };
        Ok(MemberResolver { pods, dns })
    }
}

impl std::fmt::Debug for MemberResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.dns {
            Dns::System(_) => f.write_str("MemberResolver::System"),
            Dns::Cluster(_) => f.write_str("MemberResolver::Cluster"),
        }
    }
}

type Addresses = std::vec::IntoIter<SocketAddr>;

impl Service<Name> for MemberResolver {
    type Response = Addresses;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Addresses, io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        match self.pods.lookup(name.as_str()) {
            Lookup::Address(ip) => {
                let found = vec![SocketAddr::new(ip, 0)].into_iter();
                return Box::pin(std::future::ready(Ok(found)));
            }
            Lookup::NoAddressYet => {
                let error = io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("member Pod of {} has no address yet", name.as_str()),
                );
                return Box::pin(std::future::ready(Err(error)));
            }
            Lookup::NotAMember => {}
        }
        match &mut self.dns {
            Dns::System(gai) => {
                let lookup = gai.call(name);
                Box::pin(async move { Ok(lookup.await?.collect::<Vec<_>>().into_iter()) })
            }
            Dns::Cluster(resolver) => {
                let resolver = Arc::clone(resolver);
                Box::pin(async move {
                    let found = resolver
                        .lookup_ip(name.as_str())
                        .await
                        .map_err(|e| io::Error::new(io::ErrorKind::NotFound, e.to_string()))?;
                    Ok(found
                        .iter()
                        .map(|ip| SocketAddr::new(ip, 0))
                        .collect::<Vec<_>>()
                        .into_iter())
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::{reflector, watcher};
    use serde_json::json;

    use super::*;

    fn member_pods(pods: &[serde_json::Value]) -> MemberPods {
        let (store, mut writer) = reflector::store::<Pod>();
        for pod in pods {
            let pod = serde_json::from_value(pod.clone()).unwrap();
            writer.apply_watcher_event(&watcher::Event::Apply(pod));
        }
        let member_pods = MemberPods::default();
        member_pods.watch(store);
        member_pods
    }

    fn pod(name: &str, cluster: &str, ip: Option<&str>) -> serde_json::Value {
        json!({
            "metadata": { "name": name, "namespace": "ns", "labels": { CLUSTER_LABEL: cluster } },
            "status": { "podIP": ip }
        })
    }

    /// A member's name is answered from its Pod as soon as the Pod has an address, with or
    /// without the cluster domain, and never from DNS before; any other name is left to DNS.
    #[test]
    fn a_member_name_resolves_to_its_pods_address() {
        let pods = member_pods(&[
            pod("db-a", "db", Some("10.88.0.7")),
            pod("db-b", "db", None),
            pod("other-a", "other", Some("10.88.0.8")),
        ]);
        let ip = Lookup::Address(IpAddr::from([10, 88, 0, 7]));
        assert_eq!(pods.lookup("db-a.db.ns.svc"), ip);
        assert_eq!(pods.lookup("db-a.db.ns.svc.cluster.local"), ip);
        assert_eq!(pods.lookup("db-b.db.ns.svc"), Lookup::NoAddressYet);
        for unknown in [
            "other-a.db.ns.svc",      // another cluster's Pod
            "db-a.db.elsewhere.svc",  // another namespace
            "db-a.db.ns.example.com", // not a Service name
            "db-a",                   // not a member name at all
        ] {
            assert_eq!(pods.lookup(unknown), Lookup::NotAMember, "{unknown}");
        }
        assert_eq!(
            MemberPods::default().lookup("db-a.db.ns.svc"),
            Lookup::NotAMember
        );
    }

    /// The connector gets the Pod's address without a DNS server being asked (this one is
    /// asked nothing: no server listens at its address).
    #[tokio::test]
    async fn the_resolver_answers_a_member_name_without_dns() {
        let dns = MemberDns::Cluster {
            server: IpAddr::from([127, 0, 0, 1]),
            domain: "cluster.local".to_owned(),
        };
        let pods = member_pods(&[pod("db-a", "db", Some("10.88.0.7"))]);
        let mut resolver = MemberResolver::new(&dns, pods).unwrap();
        let name: Name = "db-a.db.ns.svc".parse().unwrap();
        let found: Vec<SocketAddr> = resolver.call(name).await.into_iter().flatten().collect();
        assert_eq!(found, vec![SocketAddr::from(([10, 88, 0, 7], 0))]);
    }
}
