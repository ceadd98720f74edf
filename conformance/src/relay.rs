//! What the kit's TCP proxies share ([`CountingProxy`](crate::CountingProxy) and the fault
//! suite's stalling proxy): a listener on a free port of 127.0.0.1 that opens a connection to
//! the upstream server for each client, and copies both directions chunk by chunk. Each proxy
//! says only what happens to a chunk before it is passed on.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Which way a chunk travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// From the client to the server: a request, or part of one.
    ToServer,
    /// From the server to the client: an answer, or part of one.
    ToClient,
}

/// What a proxy does with the traffic it relays.
pub(crate) trait Relay: Send + Sync + 'static {
    /// What the proxy keeps about one client connection.
    type Connection: Send + Sync + 'static;

    /// A client connected, and its connection to the server is open.
    fn connected(&self) -> Self::Connection;

    /// A chunk of `bytes` read on `direction` is about to be passed on: it waits until this
    /// answers, and `false` closes that direction instead.
    fn passing(
        &self,
        connection: &Self::Connection,
        direction: Direction,
        bytes: usize,
    ) -> impl Future<Output = bool> + Send;
}

/// Listens on a free port of 127.0.0.1 and relays each connection made to it to `upstream`
/// (`"127.0.0.1:5432"`) through `relay`, until the returned task is aborted. A client whose
/// server connection cannot be opened sees its connection closed, as if the server were down.
pub(crate) async fn listen<R: Relay>(
    upstream: &str,
    relay: Arc<R>,
) -> io::Result<(SocketAddr, JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let local_addr = listener.local_addr()?;
    let upstream = upstream.to_owned();
    let accept = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let connection = Arc::new(relay.connected());
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::spawn(copy(
                client_read,
                server_write,
                Direction::ToServer,
                relay.clone(),
                connection.clone(),
            ));
            tokio::spawn(copy(
                server_read,
                client_write,
                Direction::ToClient,
                relay.clone(),
                connection,
            ));
        }
    });
    Ok((local_addr, accept))
}

/// Copies one direction of a connection, each chunk through [`Relay::passing`], until either
/// side closes.
async fn copy<R: Relay>(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    direction: Direction,
    relay: Arc<R>,
    connection: Arc<R::Connection>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if !relay.passing(&connection, direction, read).await {
            break;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// A server for the proxies' tests on a free port of 127.0.0.1 that answers every read with
/// the bytes it read, in two packets (the first byte, then the rest 5 ms later), as a server
/// whose reply the network splits.
#[cfg(test)]
pub(crate) async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0u8; 1024];
                while let Ok(read) = socket.read(&mut buffer).await {
                    if read == 0 {
                        break;
                    }
                    let _ = socket.write_all(&buffer[..1]).await;
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    let _ = socket.write_all(&buffer[1..read]).await;
                }
            });
        }
    });
    addr
}
