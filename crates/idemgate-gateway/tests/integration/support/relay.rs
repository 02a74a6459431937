//! A TCP relay in front of a store server that a test controls: let traffic through, cut
//! every connection and refuse new ones (a stopped server), swallow everything (a network
//! black hole: connections are accepted and never answered), or move to another server (a
//! virtual IP taken over by a promoted standby).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const PASS: u8 = 0;
const REFUSE: u8 = 1;
const BLACK_HOLE: u8 = 2;

/// A relay on `127.0.0.1:port` to a target address.
pub(crate) struct Relay {
    pub(crate) port: u16,
    mode: Arc<AtomicU8>,
    generation: Arc<watch::Sender<u64>>,
    target: Arc<Mutex<String>>,
}

impl Relay {
    /// Starts relaying to `target` (`host:port`).
    pub(crate) async fn start(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(AtomicU8::new(PASS));
        let (gen_tx, gen_rx) = watch::channel(0u64);
        let target = Arc::new(Mutex::new(target.to_owned()));
        let relay_target = target.clone();
        let relay_mode = mode.clone();
        tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    return;
                };
                let mut gen = gen_rx.clone();
                gen.borrow_and_update(); // only changes after this connection count
                match relay_mode.load(Ordering::SeqCst) {
                    REFUSE => drop(inbound),
                    BLACK_HOLE => drop(tokio::spawn(swallow(inbound, gen))),
                    _ => drop(tokio::spawn(pipe(
                        inbound,
                        relay_target.lock().unwrap().clone(),
                        gen,
                        relay_mode.clone(),
                    ))),
                }
            }
        });
        Relay {
            port,
            mode,
            generation: Arc::new(gen_tx),
            target,
        }
    }

    /// `url` with its host and port replaced by this relay's.
    pub(crate) fn url_for(&self, url: &str) -> String {
        let mut u = url::Url::parse(url).unwrap();
        u.set_host(Some("127.0.0.1")).unwrap();
        u.set_port(Some(self.port)).unwrap();
        u.to_string()
    }

    /// Cuts every connection and refuses new ones, as a stopped server would.
    pub(crate) fn stop(&self) {
        self.set(REFUSE);
    }

    /// Accepts connections and never answers; open connections stop answering too.
    pub(crate) fn black_hole(&self) {
        self.set(BLACK_HOLE);
    }

    /// Lets traffic through again (new connections).
    pub(crate) fn start_again(&self) {
        self.set(PASS);
    }

    /// Cuts every connection and relays new ones to `target` (`host:port`), as a virtual IP
    /// moved to another server would.
    pub(crate) fn retarget(&self, target: &str) {
        *self.target.lock().unwrap() = target.to_owned();
        self.set(PASS);
    }

    fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }
}

/// Relays until the mode changes: a cut drops both sides, a black hole keeps the client's
/// side open and silent.
async fn pipe(
    mut inbound: TcpStream,
    target: String,
    mut gen: watch::Receiver<u64>,
    mode: Arc<AtomicU8>,
) {
    let Ok(mut outbound) = TcpStream::connect(&target).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => return,
        _ = gen.changed() => {}
    }
    drop(outbound);
    if mode.load(Ordering::SeqCst) == BLACK_HOLE {
        swallow(inbound, gen).await;
    }
}

/// Reads and discards everything, answering nothing, until the mode changes again.
async fn swallow(mut inbound: TcpStream, mut gen: watch::Receiver<u64>) {
    let mut buf = [0u8; 4096];
    loop {
        tokio::select! {
            n = inbound.read(&mut buf) => if !matches!(n, Ok(1..)) { return },
            _ = gen.changed() => return,
        }
    }
}
