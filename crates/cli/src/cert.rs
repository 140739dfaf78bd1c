//! `syncline cert create-ca` and `syncline cert create`: a CA and
//! certificates for a local cluster's TLS listeners and clients. Offline: no
//! broker is asked.

use std::path::PathBuf;

use anyhow::{anyhow, Result};
use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub(crate) enum CertCommand {
    /// Create a CA: DIR/ca.pem (what brokers and clients trust: their
    /// ssl_ca_location / ssl.ca.location) and DIR/ca.key (keep it private).
    /// An existing CA in DIR is left alone.
    CreateCa(CreateCaArgs),
    /// Create OUT_DIR/NAME.pem and OUT_DIR/NAME.key: a certificate with
    /// CN=NAME signed by the CA in --ca-dir, for a broker (naming each --host
    /// it is reached by) or a client (principal User:CN=NAME), or both.
    Create(CreateArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CreateCaArgs {
    /// Where to write ca.pem and ca.key (created if missing).
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// The directory holding ca.pem and ca.key.
    #[arg(long, value_name = "DIR")]
    pub(crate) ca_dir: PathBuf,
    /// The certificate's name: its CN and the files' names.
    #[arg(long, value_name = "NAME")]
    pub(crate) name: String,
    /// A DNS name or IP address clients reach the broker by (repeatable);
    /// none for a client-only certificate.
    #[arg(long = "host", value_name = "HOST")]
    pub(crate) hosts: Vec<String>,
    /// Where to write NAME.pem and NAME.key (default: --ca-dir).
    #[arg(long, value_name = "DIR")]
    pub(crate) out_dir: Option<PathBuf>,
}

pub(crate) fn run(command: CertCommand) -> Result<()> {
    match command {
        CertCommand::CreateCa(args) => {
            syncline_tls::create_ca(&args.dir).map_err(|e| anyhow!("{e}"))?;
            println!("{}", syncline_tls::ca_cert_path(&args.dir).display());
            println!("{}", syncline_tls::ca_key_path(&args.dir).display());
        }
        CertCommand::Create(args) => {
            let out = args.out_dir.unwrap_or_else(|| args.ca_dir.clone());
            syncline_tls::create_cert(&args.ca_dir, &args.name, &args.hosts, &out)
                .map_err(|e| anyhow!("{e}"))?;
            println!("{}", out.join(format!("{}.pem", args.name)).display());
            println!("{}", out.join(format!("{}.key", args.name)).display());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_a_ca_and_a_certificate_it_signed() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca");
        run(CertCommand::CreateCa(CreateCaArgs { dir: ca.clone() })).unwrap();
        run(CertCommand::Create(CreateArgs {
            ca_dir: ca.clone(),
            name: "broker-1".into(),
            hosts: vec!["localhost".into(), "127.0.0.1".into()],
            out_dir: Some(dir.path().join("out")),
        }))
        .unwrap();
        let out = dir.path().join("out");
        syncline_tls::server_config(
            &out.join("broker-1.pem"),
            &out.join("broker-1.key"),
            Some(&ca.join("ca.pem")),
            syncline_tls::ClientAuth::Required,
        )
        .unwrap();
        let err = run(CertCommand::CreateCa(CreateCaArgs { dir: ca })).unwrap_err();
        assert!(err.to_string().contains("a CA is already there"), "{err}");
    }
}
