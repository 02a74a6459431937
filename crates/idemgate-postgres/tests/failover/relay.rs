//! [`Relay`]: a TCP relay on 127.0.0.1 the store connects to, whose target a test changes:
//! the connections open through it are cut, and new ones reach the new target.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A relay to a port of 127.0.0.1.
pub(crate) struct Relay {
    pub(crate) port: u16,
    target: Arc<AtomicU16>,
    cut: watch::Sender<u64>,
}

impl Relay {
    /// Starts relaying to `target`.
    pub(crate) async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(AtomicU16::new(target));
        let (cut, cuts) = watch::channel(0u64);
        let to = target.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let mut cuts = cuts.clone();
                cuts.borrow_and_update();
                tokio::spawn(pipe(inbound, to.load(Ordering::SeqCst), cuts));
            }
        });
        Relay { port, target, cut }
    }

    /// Cuts every connection and sends new ones to `target`.
    pub(crate) fn point_to(&self, target: u16) {
        self.target.store(target, Ordering::SeqCst);
        self.cut.send_modify(|n| *n += 1);
    }
}

/// Relays `inbound` to `port` until either side closes or the relay is repointed.
async fn pipe(mut inbound: TcpStream, port: u16, mut cuts: watch::Receiver<u64>) {
    let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", port)).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
        _ = cuts.changed() => {}
    }
}
