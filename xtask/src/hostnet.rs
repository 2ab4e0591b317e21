//! The host's side of the uplink tests: a TCP server on 127.0.0.1 that VMs reach through QEMU
//! user networking (as 10.0.2.2), and a client for servers in VMs (through `hostfwd`). Ports
//! are picked free by the system, so tests can run in parallel.

use anyhow::{Context, Result, bail};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// An HTTP/1.0 server on 127.0.0.1 that answers every request with `payload` and counts the
/// connections it accepted; it runs until the test process ends.
pub struct PayloadServer {
    pub port: u16,
    connections: Arc<AtomicUsize>,
}

impl PayloadServer {
    pub fn start(payload: &str) -> Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding a port")?;
        let port = listener.local_addr()?.port();
        let connections = Arc::new(AtomicUsize::new(0));
        let (count, payload) = (connections.clone(), payload.to_owned());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                count.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
                // The request's headers end with an empty line; what they say does not matter.
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n")
                    && stream.read(&mut byte).is_ok_and(|n| n == 1)
                {
                    request.push(byte[0]);
                }
                let response = format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{payload}",
                    payload.len()
                );
                let _ = stream.write_all(response.as_bytes());
                let _ = stream.shutdown(Shutdown::Write);
            }
        });
        Ok(Self { port, connections })
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (for a `hostfwd` QEMU binds itself).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding a port")?;
    Ok(listener.local_addr()?.port())
}

/// `GET /` from 127.0.0.1:`port`, retried until `timeout` while the connection is refused or
/// closed without an answer (a server in a VM that is still starting); the whole response.
pub fn http_get(port: u16, timeout: Duration) -> Result<String> {
    let start = Instant::now();
    loop {
        let attempt = (|| -> std::io::Result<String> {
            let mut s = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(b"GET / HTTP/1.0\r\nHost: armhv\r\n\r\n")?;
            let mut response = String::new();
            s.read_to_string(&mut response)?;
            Ok(response)
        })();
        match attempt {
            Ok(response) if !response.is_empty() => return Ok(response),
            _ if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(500)),
            Ok(_) => bail!("127.0.0.1:{port} closed the connection without an answer"),
            Err(e) => bail!("127.0.0.1:{port}: {e}"),
        }
    }
}
