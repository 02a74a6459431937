//! nginx beside the gateway, when it is installed: a fixed `201` upstream and a plain
//! reverse-proxy hop to it, so the benchmark reports the same ratios as
//! `scripts/bench/side_by_side.sh` (the hop is the floor of any proxy).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A single-process nginx (`master_process off`, so killing the child stops it all),
/// serving the upstream and the hop on free ports of 127.0.0.1.
pub(crate) struct Nginx {
    /// `POST` anything: `201` with a small JSON body, no access log.
    pub(crate) upstream: SocketAddr,
    /// A plain `proxy_pass` to `upstream` with upstream keep-alive.
    pub(crate) hop: SocketAddr,
    child: Child,
    _dir: tempfile::TempDir,
}

/// The nginx binary: `NGINX_BIN`, else `nginx` on `PATH`, else `/usr/sbin/nginx`.
fn binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("NGINX_BIN") {
        return Some(PathBuf::from(bin));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Nginx {
    /// Starts nginx, or `None` (with the reason printed) when it is not installed or does
    /// not start.
    pub(crate) fn start() -> Option<Self> {
        let Some(bin) = binary() else {
            println!("(nginx not installed: the nginx rows are skipped; Debian: nginx-light)\n");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let (up, hop) = (free_port(), free_port());
        let d = dir.path().display();
        let conf = format!(
            r#"daemon off;
master_process off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  keepalive_requests 10000000;
  keepalive_timeout 120s;
  default_type application/json;
  server {{
    listen 127.0.0.1:{up};
    location / {{ return 201 '{{"id":"$request_id","status":"created"}}'; }}
  }}
  upstream fast {{ server 127.0.0.1:{up}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{hop};
    location / {{
      proxy_pass http://fast;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
"#
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let child = Command::new(&bin)
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&path)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) => {
                println!(
                    "(nginx at {} did not start: {e}; nginx rows skipped)\n",
                    bin.display()
                );
                return None;
            }
        };
        let at = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
        // Dropping it kills and reaps nginx, on every path.
        let nginx = Self {
            upstream: at(up),
            hop: at(hop),
            child,
            _dir: dir,
        };
        for _ in 0..200 {
            let up = std::net::TcpStream::connect(nginx.upstream).is_ok();
            if up && std::net::TcpStream::connect(nginx.hop).is_ok() {
                return Some(nginx);
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        println!("(nginx did not listen within 5 s; nginx rows skipped)\n");
        None
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
