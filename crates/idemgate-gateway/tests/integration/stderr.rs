//! A stderr nobody reads (a full pipe, a stuck log collector) never stops the gateway: every
//! line is written by the log's own thread, access lines are dropped when its buffer is full,
//! and warnings wait in a reserve of their own.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stderr_nobody_reads_blocks_no_request_and_no_reload() {
    // An upstream that is down: every keyed request logs a warning besides its access line.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = format!("http://{}", down.local_addr().unwrap());
    drop(down);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gw.toml");
    let text = format!(
        "listen = \"127.0.0.1:{port}\"\nadmin_listen = \"\"\nupstream = \"{upstream}\"\n\
         store = \"memory://\"\n[defaults]\nallow_anonymous = true\n"
    );
    std::fs::write(&config, text).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["serve", "--config"])
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped()) // never read until the end
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // 480 warnings and 480 access lines, about 190 KB: more than a pipe holds (64 KiB).
    let send = |n: usize| {
        let base = base.clone();
        async move {
            for _ in 0..n {
                let resp = post(&base, "/payments", Some(&key()), "{}")
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await
                    .expect("answered while stderr is blocked");
                assert_eq!(resp.status(), 502);
            }
        }
    };
    let batches: Vec<_> = (0..6).map(|_| tokio::spawn(send(80))).collect();
    for batch in batches {
        batch.await.unwrap();
    }
    // A reload logs its own lines; the gateway goes on answering after it.
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(hup.success());
    tokio::time::sleep(Duration::from_millis(300)).await;
    send(20).await;
    child.kill().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
    child.wait().unwrap();
    assert!(text.contains("WARN"), "{}", &text[..text.len().min(2000)]);
}
