//! A TCP proxy on loopback for fault tests: the operator's kubeconfig points through it (TLS
//! passes untouched, the API server's certificate names 127.0.0.1), and the test switches it at
//! run time between passing traffic and failing the ways networks fail.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the proxy does with traffic, on existing and new connections alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward every byte.
    Pass,
    /// Forward nothing and close nothing: the peers see a half-open connection that never
    /// answers (a dead link, a dropped route).
    Blackhole,
    /// Close connections (new ones at once).
    Refuse,
    /// Forward each chunk after this delay.
    Delay(Duration),
}

/// The proxy, stopped when dropped.
pub struct FaultProxy {
    pub address: SocketAddr,
    fault: watch::Sender<Fault>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("binding the fault proxy: {e}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("the fault proxy's address: {e}"));
        let (fault, faults) = watch::channel(Fault::Pass);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let faults = faults.clone();
                tokio::spawn(async move {
                    if *faults.borrow() == Fault::Refuse {
                        return;
                    }
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::select! {
                        () = pump(client_read, server_write, faults.clone()) => {}
                        () = pump(server_read, client_write, faults) => {}
                    }
                });
            }
        });
        FaultProxy {
            address,
            fault,
            accept,
        }
    }

    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    /// Writes a copy of the kubeconfig at `admin` whose server is this proxy to `path`.
    pub fn kubeconfig(&self, admin: &Path, path: &Path) {
        let text = std::fs::read_to_string(admin)
            .unwrap_or_else(|e| panic!("reading {}: {e}", admin.display()));
        let proxied: String = text
            .lines()
            .map(|line| match line.split_once("server: ") {
                Some((indent, _)) => format!("{indent}server: https://{}\n", self.address),
                None => format!("{line}\n"),
            })
            .collect();
        std::fs::write(path, proxied).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.fault.send_replace(Fault::Refuse);
    }
}

/// Copies `from` to `to` chunk by chunk, as the current fault allows; returns when either side
/// closes or the fault is [`Fault::Refuse`].
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut faults: watch::Receiver<Fault>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        // Blackholed: neither read nor write until the fault changes (the kernel buffers fill,
        // as on a dead link).
        let fault = match faults.wait_for(|f| *f != Fault::Blackhole).await {
            Ok(fault) => *fault,
            Err(_) => return,
        };
        if fault == Fault::Refuse {
            return;
        }
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            changed = faults.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
        };
        let Ok(count @ 1..) = read else {
            return;
        };
        let chunk = buffer.get(..count).unwrap_or_default();
        // The fault may have changed while reading: hold the chunk through a blackhole.
        let fault = match faults.wait_for(|f| *f != Fault::Blackhole).await {
            Ok(fault) => *fault,
            Err(_) => return,
        };
        match fault {
            Fault::Refuse => return,
            Fault::Delay(delay) => tokio::time::sleep(delay).await,
            Fault::Pass | Fault::Blackhole => {}
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}
