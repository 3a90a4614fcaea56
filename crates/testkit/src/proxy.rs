//! A TCP proxy on loopback for fault tests: the operator's kubeconfig points through it (TLS
//! passes untouched, the API server's certificate names 127.0.0.1), and the test switches it at
//! run time between passing traffic and failing the ways networks fail.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the proxy does with traffic, on existing and new connections alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward every byte.
    Pass,
    /// Forward nothing and close nothing: the peers see a half-open connection that never
    /// answers (a dead link, a dropped route).
    Blackhole,
    /// [`Fault::Blackhole`] for the connections open when it was set, [`Fault::Pass`] for new
    /// ones: watches that silently died while new requests still work.
    BlackholeOpen,
    /// Close connections (new ones at once).
    Refuse,
    /// Reset connections (TCP RST, as a crashed peer or a firewall does; new ones at once): the
    /// client sees "connection reset by peer" instead of an orderly close.
    Reset,
    /// Forward each chunk from upstream this much later than it came (a slow link or API
    /// server: every answer is late by it; requests still go out at once, none waits for
    /// another).
    Delay(Duration),
    /// Read every request and forward none until the fault changes, then all of them in order;
    /// answers pass. What a deposed leader's writes look like when the network holds them: sent
    /// while it led, arriving after its successor's (a "zombie" write). The connection must
    /// stay open meanwhile (a stopped process's does).
    HoldRequests,
}

/// The fault in force, and the number the next connection will get when it was set.
#[derive(Debug, Clone, Copy)]
struct Setting {
    fault: Fault,
    next_connection: u64,
}

impl Setting {
    /// What the setting does to connection number `connection`.
    fn on(self, connection: u64) -> Fault {
        match self.fault {
            Fault::BlackholeOpen if connection < self.next_connection => Fault::Blackhole,
            Fault::BlackholeOpen => Fault::Pass,
            fault => fault,
        }
    }
}

/// The proxy, stopped when dropped.
pub struct FaultProxy {
    pub address: SocketAddr,
    setting: watch::Sender<Setting>,
    connections: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        FaultProxy::start_on((std::net::Ipv4Addr::LOCALHOST, 0).into(), upstream).await
    }

    /// Listens on `address` (the node's, for Pods to reach; port 0 for a free one) and forwards
    /// to `upstream`.
    pub async fn start_on(address: SocketAddr, upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind(address)
            .await
            .unwrap_or_else(|e| panic!("binding the fault proxy: {e}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("the fault proxy's address: {e}"));
        let (setting, settings) = watch::channel(Setting {
            fault: Fault::Pass,
            next_connection: 0,
        });
        let connections = Arc::new(AtomicU64::new(0));
        let numbering = connections.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let connection = Connection {
                    number: numbering.fetch_add(1, Ordering::SeqCst),
                    settings: settings.clone(),
                };
                tokio::spawn(async move {
                    if !matches!(connection.fault(), Fault::Refuse | Fault::Reset) {
                        forward(&client, upstream, &connection).await;
                    }
                    if connection.fault() == Fault::Reset {
                        // Closing with a zero linger sends RST instead of FIN.
                        let _ = client.set_zero_linger();
                    }
                });
            }
        });
        FaultProxy {
            address,
            setting,
            connections,
            accept,
        }
    }

    pub fn set(&self, fault: Fault) {
        self.setting.send_replace(Setting {
            fault,
            next_connection: self.connections.load(Ordering::SeqCst),
        });
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
        self.set(Fault::Refuse);
    }
}

/// One proxied connection: its number and the proxy's setting (each pump holds a clone, to wait
/// for changes on its own).
#[derive(Clone)]
struct Connection {
    number: u64,
    settings: watch::Receiver<Setting>,
}

impl Connection {
    fn fault(&self) -> Fault {
        self.settings.borrow().on(self.number)
    }

    /// Waits while the fault is a blackhole; the fault then in force (`None`: proxy gone).
    async fn unless_blackholed(&mut self) -> Option<Fault> {
        let number = self.number;
        self.settings
            .wait_for(|s| s.on(number) != Fault::Blackhole)
            .await
            .ok()
            .map(|s| s.on(number))
    }
}

/// Forwards between `client` and a new connection to `upstream` until either side closes or
/// the fault is [`Fault::Refuse`] or [`Fault::Reset`].
async fn forward(client: &TcpStream, upstream: SocketAddr, connection: &Connection) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    tokio::select! {
        () = pump(client, &server, connection.clone(), Leg::Request) => {}
        () = pump(&server, client, connection.clone(), Leg::Answer) => {}
    }
    if connection.fault() == Fault::Reset {
        let _ = server.set_zero_linger();
    }
}

/// Which way a pump copies: [`Fault::Delay`] holds answers only.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Leg {
    Request,
    Answer,
}

/// What a pump does after its reading half stops.
enum Then {
    /// The source closed: write what is still held, then close.
    Flush,
    /// Refused, reset, or the proxy gone: drop it.
    Stop,
}

/// Copies `from` to `to` chunk by chunk, as the current fault allows; returns when either side
/// closes or the fault is [`Fault::Refuse`] or [`Fault::Reset`]. Reading and writing run apart,
/// so a delay holds every chunk for its time without holding up the ones read after it (a slow
/// link, not a serialised one).
async fn pump(from: &TcpStream, to: &TcpStream, connection: Connection, leg: Leg) {
    let (held, mut due) = tokio::sync::mpsc::unbounded_channel::<(Instant, bool, Vec<u8>)>();
    let mut faults = connection.clone();
    let reading = async move {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            // Blackholed: neither read nor write until the fault changes (the kernel buffers
            // fill, as on a dead link).
            let Some(fault) = faults.unless_blackholed().await else {
                return Then::Stop;
            };
            let delay = match fault {
                Fault::Refuse | Fault::Reset => return Then::Stop,
                Fault::Delay(delay) if leg == Leg::Answer => delay,
                _ => Duration::ZERO,
            };
            let hold = fault == Fault::HoldRequests && leg == Leg::Request;
            let read = tokio::select! {
                read = read_some(from, &mut buffer) => read,
                changed = faults.settings.changed() => {
                    if changed.is_err() {
                        return Then::Stop;
                    }
                    continue;
                }
            };
            let Ok(count @ 1..) = read else {
                return Then::Flush;
            };
            let chunk = buffer.get(..count).unwrap_or_default().to_vec();
            if held.send((Instant::now() + delay, hold, chunk)).is_err() {
                return Then::Stop;
            }
        }
    };
    let mut faults = connection;
    let writing = async move {
        while let Some((at, hold, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if hold {
                let number = faults.number;
                let released = faults
                    .settings
                    .wait_for(|s| s.on(number) != Fault::HoldRequests)
                    .await;
                if released.is_err() {
                    return;
                }
            }
            // The fault may have changed while it was held: hold it through a blackhole.
            match faults.unless_blackholed().await {
                None | Some(Fault::Refuse | Fault::Reset) => return,
                Some(_) => {}
            }
            if write_all(to, &chunk).await.is_err() {
                return;
            }
        }
    };
    tokio::pin!(writing);
    let then = tokio::select! {
        then = reading => then,
        () = &mut writing => return,
    };
    if matches!(then, Then::Flush) {
        writing.await;
    }
}

/// Reads what `stream` has (0 at its end), through a shared reference: both directions of one
/// connection are pumped at once, and the socket stays whole so it can be reset.
async fn read_some(stream: &TcpStream, buffer: &mut [u8]) -> std::io::Result<usize> {
    loop {
        stream.readable().await?;
        match stream.try_read(buffer) {
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => continue,
            read => return read,
        }
    }
}

async fn write_all(stream: &TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(written) => bytes = bytes.get(written..).unwrap_or_default(),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// An echo server behind a proxy, and a client connected through it that has had one echo.
    async fn echoing_connection() -> (FaultProxy, TcpStream) {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut peer, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 64];
                    while let Ok(count @ 1..) = peer.read(&mut buffer).await {
                        if peer.write_all(&buffer[..count]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let proxy = FaultProxy::start(upstream).await;
        let mut client = TcpStream::connect(proxy.address).await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut answer = [0u8; 4];
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"ping");
        (proxy, client)
    }

    /// What a client reading from a connection through the proxy gets within 5 s.
    async fn read_outcome(client: &mut TcpStream) -> std::io::Result<usize> {
        let mut buffer = [0u8; 16];
        tokio::time::timeout(Duration::from_secs(5), client.read(&mut buffer))
            .await
            .unwrap_or_else(|_| panic!("the connection neither closed nor reset"))
    }

    #[tokio::test]
    async fn refuse_closes_and_reset_resets_open_and_new_connections() {
        let (proxy, mut open) = echoing_connection().await;
        proxy.set(Fault::Refuse);
        assert_eq!(read_outcome(&mut open).await.unwrap(), 0, "closed (FIN)");
        let mut new = TcpStream::connect(proxy.address).await.unwrap();
        assert_eq!(read_outcome(&mut new).await.unwrap(), 0, "a new one closed");

        let (proxy, mut open) = echoing_connection().await;
        proxy.set(Fault::Reset);
        let reset = |outcome: std::io::Result<usize>| {
            outcome.is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset)
        };
        assert!(reset(read_outcome(&mut open).await), "open one reset");
        let mut new = TcpStream::connect(proxy.address).await.unwrap();
        assert!(reset(read_outcome(&mut new).await), "new one reset");
    }

    #[tokio::test]
    async fn blackhole_open_silences_open_connections_and_passes_new_ones() {
        let (proxy, mut open) = echoing_connection().await;
        proxy.set(Fault::BlackholeOpen);
        let mut new = TcpStream::connect(proxy.address).await.unwrap();
        new.write_all(b"new").await.unwrap();
        let mut answer = [0u8; 3];
        new.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"new", "a new connection passes");
        open.write_all(b"old").await.unwrap();
        let mut buffer = [0u8; 3];
        let silent = tokio::time::timeout(Duration::from_secs(1), open.read(&mut buffer)).await;
        assert!(silent.is_err(), "the open connection answered: {silent:?}");
    }

    #[tokio::test]
    async fn held_requests_reach_the_server_only_when_released_and_in_order() {
        let (proxy, mut client) = echoing_connection().await;
        proxy.set(Fault::HoldRequests);
        client.write_all(b"a").await.unwrap();
        client.write_all(b"b").await.unwrap();
        let mut answer = [0u8; 2];
        let held = tokio::time::timeout(Duration::from_secs(1), client.read(&mut answer)).await;
        assert!(held.is_err(), "a held request was answered: {held:?}");
        proxy.set(Fault::Pass);
        client.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"ab", "released, in order");
    }

    #[tokio::test]
    async fn delay_holds_each_answer_for_its_time_without_queuing_them() {
        let (proxy, mut client) = echoing_connection().await;
        proxy.set(Fault::Delay(Duration::from_secs(1)));
        let sent = Instant::now();
        client.write_all(b"a").await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        client.write_all(b"b").await.unwrap();
        let mut answer = [0u8; 1];
        client.read_exact(&mut answer).await.unwrap();
        let first = sent.elapsed();
        client.read_exact(&mut answer).await.unwrap();
        let second = sent.elapsed();
        assert!(
            first >= Duration::from_secs(1) && first < Duration::from_millis(1250),
            "the first answer came after {first:?} (1 s late)"
        );
        assert!(
            second >= Duration::from_millis(1300) && second < Duration::from_millis(1550),
            "the second answer came after {second:?} (sent 0.3 s later, 1 s late, not queued)"
        );
    }
}
