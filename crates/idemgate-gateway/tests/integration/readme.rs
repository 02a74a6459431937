//! The README's worked example is what a new user gets: its `curl` commands run against the
//! real `idemgate` binaries, and every line the README shows must appear in the output.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start(args: &[&str], port: u16) -> Process {
    let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let process = Process(child);
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return process;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("{args:?} did not start");
}

/// (command, expected lines) for each `console` block of the example section.
fn example_blocks(readme: &str) -> Vec<(String, Vec<String>)> {
    let section = readme
        .split("<!-- example:begin -->")
        .nth(1)
        .and_then(|s| s.split("<!-- example:end -->").next())
        .expect("README has the example section");
    section
        .split("```console\n")
        .skip(1)
        .map(|block| {
            let block = block.split("```").next().unwrap();
            let mut lines = block.lines();
            let cmd = lines
                .next()
                .unwrap()
                .strip_prefix("$ ")
                .expect("a block starts with `$ `");
            (cmd.to_owned(), lines.map(str::to_owned).collect())
        })
        .collect()
}

#[test]
fn readme_example_is_what_a_user_gets() {
    assert!(
        Command::new("curl").arg("--version").output().is_ok(),
        "curl is needed to run the README's example"
    );
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let blocks = example_blocks(&readme);
    assert!(blocks.len() >= 5, "found {} example blocks", blocks.len());

    let dir = tempfile::tempdir().unwrap();
    let (api, gw) = (free_port(), free_port());
    let _api = start(&["demo-api", "--listen", &format!("127.0.0.1:{api}")], api);
    let store = format!("sqlite://{}", dir.path().join("example.db").display());
    let _gw = start(
        &[
            "serve",
            "--listen",
            &format!("127.0.0.1:{gw}"),
            "--admin-listen",
            "",
            "--upstream",
            &format!("http://127.0.0.1:{api}"),
            "--store",
            &store,
        ],
        gw,
    );
    for (cmd, expected) in blocks {
        let cmd = cmd
            .replace("127.0.0.1:8080", &format!("127.0.0.1:{gw}"))
            .replace("127.0.0.1:3000", &format!("127.0.0.1:{api}"));
        let out = Command::new("sh").args(["-c", &cmd]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
        let got: Vec<&str> = text.lines().collect();
        for want in &expected {
            let found = got
                .iter()
                .any(|g| g == want || (want.contains(": ") && g.eq_ignore_ascii_case(want)));
            assert!(found, "`{cmd}`\nmissing line: {want}\ngot:\n{text}");
        }
    }
}
