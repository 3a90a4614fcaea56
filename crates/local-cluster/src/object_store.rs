//! The real node's S3-compatible object store: versitygw's POSIX gateway, so backups can go to a
//! bucket as they would in production, with SigV4 signatures checked and user metadata kept.
//!
//! It listens on the machine's own address (Pods on the node reach it there; the address is
//! routed only on this machine), keeps its objects under the node's directory (metadata in
//! extended attributes, which the node's ext4 disk has), and has one account whose random keys
//! are made anew at each `cluster-up` and written beside it ([`ObjectStore::load`]).

use std::fs;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::process::{self, Spec};

/// The bucket made at start, for backups.
pub const BUCKET: &str = "backups";
/// The region the gateway signs for (its default, said explicitly).
pub const REGION: &str = "us-east-1";
/// The process's name in the cluster's logs and pid files (and what `cluster-down` prints).
pub(crate) const NAME: &str = "object-store";
/// The file in the node's directory that says how to reach the store.
const FILE: &str = "object-store.json";

/// How to reach the object store: what a client (a test, a Secret for the operator) needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStore {
    /// `http://<machine address>:<port>`; path-style requests (`<endpoint>/<bucket>/<key>`).
    pub endpoint: String,
    pub bucket: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub region: String,
}

impl ObjectStore {
    /// The store a node started, from the node's directory (`NodeLayout::object_store` finds it
    /// from a cluster's).
    pub fn load(node_dir: &Path) -> Result<ObjectStore, Error> {
        let path = file(node_dir);
        let text = fs::read_to_string(&path).map_err(Error::io("reading", &path))?;
        serde_json::from_str(&text).map_err(|source| {
            Error::Invalid(format!(
                "{} is not an object store's: {source}",
                path.display()
            ))
        })
    }

    /// A store on `address` with fresh random keys (20 and 40 characters, as AWS's are).
    pub(crate) fn generate(address: SocketAddrV4) -> Result<ObjectStore, Error> {
        let mut random = [0u8; 30];
        fs::File::open("/dev/urandom")
            .and_then(|mut urandom| urandom.read_exact(&mut random))
            .map_err(Error::io("reading", "/dev/urandom"))?;
        let (access, secret) = random.split_at(10);
        Ok(ObjectStore {
            endpoint: format!("http://{address}"),
            bucket: BUCKET.to_owned(),
            access_key_id: hex(access).to_uppercase(),
            secret_access_key: hex(secret),
            region: REGION.to_owned(),
        })
    }

    /// `host:port` of the endpoint.
    pub fn address(&self) -> &str {
        self.endpoint
            .strip_prefix("http://")
            .unwrap_or(&self.endpoint)
    }

    /// versitygw serving the directory `data` as the root account with these keys, on the
    /// endpoint's address only.
    pub(crate) fn spec(&self, program: PathBuf, data: &Path) -> Spec {
        Spec {
            name: NAME.into(),
            program,
            args: [
                "--access",
                &self.access_key_id,
                "--secret",
                &self.secret_access_key,
                "--region",
                &self.region,
                "--port",
                self.address(),
                "posix",
                &data.display().to_string(),
            ]
            .map(str::to_owned)
            .to_vec(),
        }
    }

    /// Writes where the store is and its keys into the node's directory.
    pub(crate) fn save(&self, node_dir: &Path) -> Result<PathBuf, Error> {
        let path = file(node_dir);
        let text = serde_json::to_string_pretty(self).map_err(|source| Error::Json {
            what: "object store",
            source,
        })?;
        fs::write(&path, text).map_err(Error::io("writing", &path))?;
        Ok(path)
    }

    /// Creates the bucket with a signed `PUT /<bucket>` (curl signs it; the keys go on its
    /// standard input, so an error message does not show the secret).
    pub(crate) fn create_bucket(&self) -> Result<(), Error> {
        let url = format!("{}/{}", self.endpoint, self.bucket);
        process::run_with_input(
            Command::new("curl").args([
                "--fail-with-body",
                "--silent",
                "--show-error",
                "--noproxy",
                "*",
                "--max-time",
                "30",
                "--output",
                "/dev/stderr",
                "--config",
                "-",
                "--aws-sigv4",
                &format!("aws:amz:{}:s3", self.region),
                // versitygw refuses a request without it; curl 7.88 does not add it itself.
                "--header",
                "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                "--request",
                "PUT",
                &url,
            ]),
            &format!(
                "user = \"{}:{}\"\n",
                self.access_key_id, self.secret_access_key
            ),
        )
        .map(|_| ())
        .map_err(|error| {
            Error::Invalid(format!(
                "creating the bucket {url} in the object store (versitygw): {error}"
            ))
        })
    }
}

/// A port free on `address` now (the store binds it right after).
pub(crate) fn free_port(address: Ipv4Addr) -> Result<u16, Error> {
    TcpListener::bind((address, 0))
        .and_then(|listener| listener.local_addr())
        .map(|local| local.port())
        .map_err(Error::io("binding a free port on", address.to_string()))
}

/// Where a node's store is described: `<node dir>/object-store.json`.
pub fn file(node_dir: &Path) -> PathBuf {
    node_dir.join(FILE)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_fresh_and_shaped_as_aws_keys() -> Result<(), Error> {
        let address = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 7070);
        let (one, two) = (
            ObjectStore::generate(address)?,
            ObjectStore::generate(address)?,
        );
        assert_ne!(one.access_key_id, two.access_key_id);
        assert_ne!(one.secret_access_key, two.secret_access_key);
        assert_eq!(one.access_key_id.len(), 20);
        assert_eq!(one.secret_access_key.len(), 40);
        assert!(
            one.access_key_id
                .chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
        );
        assert_eq!(one.address(), "192.0.2.2:7070");
        Ok(())
    }

    #[test]
    fn the_gateway_listens_on_the_endpoint_and_serves_the_data_directory() -> Result<(), Error> {
        let store = ObjectStore::generate(SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 7070))?;
        let spec = store.spec(
            PathBuf::from("versitygw"),
            Path::new("/state/node/object-store"),
        );
        let args = spec.args.join(" ");
        assert!(args.contains("--port 192.0.2.2:7070 "), "{args}");
        assert!(args.contains("--region us-east-1 "), "{args}");
        assert!(args.ends_with(" posix /state/node/object-store"), "{args}");
        Ok(())
    }
}
