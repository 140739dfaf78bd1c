//! Network faults between brokers on one machine: each broker listens on, and
//! connects from, a loopback address of its own (`syncline_e2e::Layout`), and
//! an nftables table that this harness owns drops packets between pairs of them.
//! Clients of the harness connect from 127.0.0.1 and are never cut.
//!
//! The table (`syncline_chaos_<pid>`) is deleted when the [`Firewall`] is
//! dropped, and tables of earlier runs whose process is gone are deleted at
//! start ([`remove_stale`]); the host's own rules are never touched.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::process::{Command, Stdio};

/// Why network faults cannot be injected here, if they cannot.
pub fn unavailable() -> Option<String> {
    if !nix::unistd::Uid::effective().is_root() {
        return Some("network faults need root (nftables)".into());
    }
    match Command::new("nft").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("network faults need the nft command (Debian's nftables package)".into()),
    }
}

const PREFIX: &str = "syncline_chaos_";

fn nft(script: &str) -> io::Result<()> {
    let mut child = Command::new("nft")
        .arg("-f")
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or_else(|| io::Error::other("nft: no stdin"))?
        .write_all(script.as_bytes())?;
    let out = child.wait_with_output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "nft -f - failed: {}\nscript:\n{script}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Deletes the tables of earlier runs whose process is gone; returns how many.
pub fn remove_stale() -> usize {
    let Ok(out) = Command::new("nft").args(["list", "tables"]).output() else {
        return 0;
    };
    let mut removed = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(name) = line.strip_prefix("table inet ") else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        if !alive && nft(&format!("delete table inet {name}\n")).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// How packets from one broker to another fare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Every packet dropped.
    Cut,
    /// This percentage of packets dropped at random.
    Lossy(u8),
}

/// The harness's nftables table.
#[derive(Debug)]
pub struct Firewall {
    table: String,
    /// Each broker's address.
    hosts: BTreeMap<i32, String>,
}

impl Firewall {
    /// Creates this process's table, with an empty output chain.
    pub fn create(hosts: BTreeMap<i32, String>) -> io::Result<Firewall> {
        let table = format!("{PREFIX}{}", std::process::id());
        nft(&format!(
            "add table inet {table}\n\
             add chain inet {table} output {{ type filter hook output priority 0; policy accept; }}\n\
             flush chain inet {table} output\n"
        ))?;
        Ok(Firewall { table, hosts })
    }

    /// Replaces every rule: each `(from, to)` link fares as given, the others
    /// are whole. One transaction: no moment with half the rules.
    pub fn set(&self, links: &BTreeMap<(i32, i32), Link>) -> io::Result<()> {
        let t = &self.table;
        let mut script = format!("flush chain inet {t} output\n");
        for ((from, to), link) in links {
            let host = |id: &i32| {
                self.hosts
                    .get(id)
                    .cloned()
                    .ok_or_else(|| io::Error::other(format!("no broker {id}")))
            };
            let (from, to) = (host(from)?, host(to)?);
            let action = match link {
                Link::Cut => "drop".to_string(),
                Link::Lossy(pct) => format!("numgen random mod 100 < {pct} drop"),
            };
            script.push_str(&format!(
                "add rule inet {t} output ip saddr {from} ip daddr {to} {action}\n"
            ));
        }
        nft(&script)
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }
}

impl Drop for Firewall {
    fn drop(&mut self) {
        let _ = nft(&format!("delete table inet {}\n", self.table));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::time::Duration;

    fn host(id: i32) -> String {
        format!("127.0.101.{id}")
    }

    fn connects(from: i32, to: &TcpListener) -> bool {
        let socket = nix_socket(from);
        let addr = to.local_addr().unwrap();
        socket
            .connect_timeout(&addr.into(), Duration::from_millis(300))
            .is_ok()
    }

    fn nix_socket(from: i32) -> socket2::Socket {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let src: SocketAddr = format!("{}:0", host(from)).parse().unwrap();
        s.bind(&src.into()).unwrap();
        s
    }

    #[test]
    fn cuts_drop_one_direction_and_the_table_goes_with_the_firewall() {
        if let Some(why) = unavailable() {
            println!("skipped: {why}");
            return;
        }
        let to2 = TcpListener::bind(format!("{}:0", host(2))).unwrap();
        let to1 = TcpListener::bind(format!("{}:0", host(1))).unwrap();
        let fw = Firewall::create(BTreeMap::from([(1, host(1)), (2, host(2))])).unwrap();
        assert!(connects(1, &to2) && connects(2, &to1));
        fw.set(&BTreeMap::from([((1, 2), Link::Cut)])).unwrap();
        assert!(!connects(1, &to2), "1 -> 2 is cut");
        // 2 -> 1: the SYN passes, the SYN-ACK (1 -> 2) does not: a one-way cut
        // still breaks TCP both ways, as on a real network.
        assert!(!connects(2, &to1));
        // The harness's own connections, from 127.0.0.1, pass.
        assert!(
            TcpStream::connect_timeout(&to2.local_addr().unwrap(), Duration::from_secs(1)).is_ok()
        );
        fw.set(&BTreeMap::new()).unwrap();
        assert!(connects(1, &to2));
        let table = fw.table().to_string();
        drop(fw);
        let out = Command::new("nft")
            .args(["list", "tables"])
            .output()
            .unwrap();
        assert!(!String::from_utf8_lossy(&out.stdout).contains(&table));
    }
}
