//! How the etcd client turns a member's host name into addresses. In the cluster, the Pod's own
//! resolver (cluster DNS) does it. An operator run outside the cluster (`make run`, a debugger)
//! cannot resolve `<pod>.<cluster>.<namespace>.svc` with the host's resolver, so
//! `--etcd-dns-server` asks the cluster's DNS directly, with the cluster domain as the search
//! domain, exactly as a Pod's resolv.conf would: the product keeps its production addressing.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::Name as DnsName;
use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use tower_service::Service;

/// Where member names are resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MemberDns {
    /// The resolver of the machine or Pod the operator runs in.
    #[default]
    System,
    /// A cluster DNS server (its address) and the cluster domain, for names without it.
    Cluster { server: IpAddr, domain: String },
}

/// The resolver [`super::EtcdGateway`]'s connector uses.
#[derive(Clone)]
pub enum MemberResolver {
    System(GaiResolver),
    Cluster(Arc<TokioResolver>),
}

impl MemberResolver {
    pub fn new(dns: &MemberDns) -> Result<MemberResolver, String> {
        match dns {
            MemberDns::System => Ok(MemberResolver::default()),
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
                Ok(MemberResolver::Cluster(Arc::new(resolver)))
            }
        }
    }
}

impl Default for MemberResolver {
    fn default() -> Self {
        MemberResolver::System(GaiResolver::new())
    }
}

impl std::fmt::Debug for MemberResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemberResolver::System(_) => f.write_str("MemberResolver::System"),
            MemberResolver::Cluster(_) => f.write_str("MemberResolver::Cluster"),
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
        match self {
            MemberResolver::System(gai) => {
                let lookup = gai.call(name);
                Box::pin(async move { Ok(lookup.await?.collect::<Vec<_>>().into_iter()) })
            }
            MemberResolver::Cluster(resolver) => {
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
