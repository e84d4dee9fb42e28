//! Whether an HTTP caller is still there. actix-web does not drop a handler that waits (for
//! a song, a transcription) when its client goes away, so the routes that promise "a client
//! that disconnects cancels its job" ask the connection itself: each TCP connection carries
//! a duplicate of its socket ([`on_connect`]), which [`while_connected`] peeks at.
use actix_web::HttpRequest;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

/// A connection's socket, to peek at.
#[derive(Clone)]
pub struct Peer(Arc<std::net::TcpStream>);

impl Peer {
    /// The peer has closed its side (an end of stream waits in the socket) or the socket
    /// failed. A request pipelined behind this one, or nothing yet, is a peer still there.
    fn gone(&self) -> bool {
        let mut b = [0u8; 1];
        match self.0.peek(&mut b) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::Interrupted,
        }
    }
}

impl Peer {
    /// The connection of `req` (where the server keeps one).
    pub fn of(req: &HttpRequest) -> Option<Peer> {
        req.conn_data::<Peer>().cloned()
    }

    /// Cuts the connection now: a reset instead of a close that would wait for a peer that
    /// does not read to take what is still buffered for it (the server's buffers and the
    /// kernel's are freed at once, and the server's next write fails, ending the connection).
    pub fn cut(&self) {
        let sock = socket2::SockRef::from(&*self.0);
        let _ = sock.set_linger(Some(Duration::ZERO));
        let _ = sock.shutdown(std::net::Shutdown::Both);
    }
}

/// `HttpServer::on_connect`: keeps a duplicate of a TCP connection's socket with it.
pub fn on_connect(conn: &dyn std::any::Any, data: &mut actix_web::dev::Extensions) {
    let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() else { return };
    let Ok(fd) = tcp.as_fd().try_clone_to_owned() else { return };
    let socket = std::net::TcpStream::from(fd);
    // The duplicate shares the socket's non-blocking mode (tokio's); said again, so that a
    // peek never waits.
    if socket.set_nonblocking(true).is_ok() {
        data.insert(Peer(Arc::new(socket)));
    }
}

/// Runs `work` while the caller's connection stays open (looked at every 250 ms); `None`
/// when the caller went away first, `work` then dropped.
pub async fn while_connected<T>(req: &HttpRequest, work: impl std::future::Future<Output = T>) -> Option<T> {
    let Some(peer) = req.conn_data::<Peer>().cloned() else { return Some(work.await) };
    let mut work = std::pin::pin!(work);
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            r = &mut work => return Some(r),
            _ = tick.tick() => {
                if peer.gone() {
                    return None;
                }
            }
        }
    }
}
