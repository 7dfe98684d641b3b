//! A real load balancer in front of a deployment's instances: Debian's nginx, run from the
//! repository's own `deploy/nginx/seckill.conf` rendered on a spare loopback port, with a
//! folder of its own. Buyers reach it from their own loopback addresses (`127.0.x.y`, each
//! a distinct client to nginx), and nginx reaches the instances from 127.0.0.1, the address
//! the instances are told to trust. Killed when dropped.

use super::{spare_port, wait};
use std::{net::IpAddr, path::PathBuf, process::Stdio, time::Duration};
use tokio::process::{Child, Command};

fn binary() -> String {
    std::env::var("NGINX_BIN").unwrap_or_else(|_| "/usr/sbin/nginx".into())
}

/// The edge limits of one rendering of the template.
pub(crate) struct EdgeLimits {
    pub(crate) buys_per_s: u32,
    pub(crate) burst: u32,
    pub(crate) connections_per_address: u32,
}

pub(crate) struct Balancer {
    port: u16,
    child: Child,
    _dir: TempDir,
}

/// The balancer's folder, removed with it.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Balancer {
    /// nginx balancing over `instances` (`http://127.0.0.1:PORT` each), once it accepts
    /// connections.
    pub(crate) async fn start(instances: &[&str], limits: &EdgeLimits) -> Self {
        let port = spare_port();
        let dir = std::env::temp_dir().join(format!("seckill-nginx-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("balancer folder");
        let template = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/nginx/seckill.conf"),
        )
        .expect("deploy/nginx/seckill.conf");
        let upstreams: Vec<String> = instances
            .iter()
            .map(|url| {
                let host = url.trim_start_matches("http://").trim_end_matches('/');
                format!("server {host} max_fails=0;")
            })
            .collect();
        let config = template
            .replace("{{RUN_DIR}}", &dir.display().to_string())
            .replace("{{LISTEN}}", &format!("127.0.0.1:{port}"))
            .replace("{{UPSTREAMS}}", &upstreams.join("\n        "))
            .replace("{{BUY_RATE}}", &limits.buys_per_s.to_string())
            .replace("{{BUY_BURST}}", &limits.burst.to_string())
            .replace(
                "{{CONN_PER_ADDRESS}}",
                &limits.connections_per_address.to_string(),
            );
        assert!(!config.contains("{{"), "every placeholder filled: {config}");
        let file = dir.join("nginx.conf");
        std::fs::write(&file, config).expect("nginx.conf");
        let child = Command::new(binary())
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&file)
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its workers are its children: a group of their own, so that all go together
            // (a SIGKILL to the master alone leaves the workers serving the port).
            .process_group(0)
            .spawn()
            .expect("nginx runs (Debian's nginx; set NGINX_BIN if it is not /usr/sbin/nginx)");
        let balancer = Self {
            port,
            child,
            _dir: TempDir(dir),
        };
        wait::until(
            &format!("nginx accepting on port {port}"),
            Duration::from_secs(20),
            || async {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .map(drop)
            },
        )
        .await;
        balancer
    }

    pub(crate) fn address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The `n`th distinct buyer address on loopback: 127.1.0.1, 127.1.0.2, ... (never
    /// 127.0.0.1, the balancer's own address, which the instances trust).
    pub(crate) fn client_address(n: u32) -> IpAddr {
        let n = n + 1;
        IpAddr::from([127, 1, (n >> 8) as u8, (n & 0xff) as u8])
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        super::start_killing_group(&self.child);
    }
}
