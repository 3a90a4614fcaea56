//! The real node's image registry: Debian's `docker-registry` (distribution) on loopback, which
//! containerd uses in place of every registry host, and a push of OCI image archives into it over
//! the registry HTTP API (no Docker, no `ctr`): blobs the registry already has are skipped, so a
//! warm start pushes nothing.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use crate::error::Error;

/// Debian's `docker-registry` package.
pub const PROGRAM: &str = "/usr/bin/docker-registry";

/// The registry's configuration: filesystem storage in `storage`, HTTP on `address` (loopback).
pub fn config(storage: &Path, address: &str) -> String {
    format!(
        "version: 0.1\n\
         log:\n  level: warn\n  accesslog:\n    disabled: true\n\
         storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
         http:\n  addr: {address}\n",
        storage.display()
    )
}

/// `docker.io/library/nginx:1.22` → (`library/nginx`, `1.22`): the repository path and tag the
/// registry serves it under, whichever host the name gives (the registry stands in for all).
pub fn repository_and_tag(name: &str) -> Option<(&str, &str)> {
    let (host, rest) = name.split_once('/')?;
    if !(host.contains('.') || host.contains(':') || host == "localhost") {
        return None;
    }
    let (repository, tag) = rest.rsplit_once(':')?;
    (!repository.is_empty() && !tag.is_empty() && !tag.contains('/')).then_some((repository, tag))
}

/// The fully qualified name of an image reference, as containerd normalises it: `nginx` →
/// `docker.io/library/nginx:latest`, `me/op:v1` → `docker.io/me/op:v1`.
pub fn qualified_name(reference: &str) -> String {
    let (first, _) = reference.split_once('/').unwrap_or(("", reference));
    let has_host = first.contains('.') || first.contains(':') || first == "localhost";
    let named = if has_host {
        reference.to_owned()
    } else if reference.contains('/') {
        format!("docker.io/{reference}")
    } else {
        format!("docker.io/library/{reference}")
    };
    let last = named.rsplit('/').next().unwrap_or_default();
    if last.contains(':') || last.contains('@') {
        named
    } else {
        format!("{named}:latest")
    }
}

/// Pushes every image an OCI archive names (the `io.containerd.image.name` annotations of its
/// index) to the registry at `address`; their names.
pub fn push_archive(archive: &Path, address: &str) -> Result<Vec<String>, Error> {
    let index: serde_json::Value = serde_json::from_slice(&read_entry(archive, "index.json")?)
        .map_err(|e| Error::Invalid(format!("{}: index.json: {e}", archive.display())))?;
    let manifests = index["manifests"].as_array().cloned().unwrap_or_default();
    let mut names = Vec::new();
    for descriptor in manifests {
        let digest = descriptor["digest"].as_str().unwrap_or_default().to_owned();
        let media_type = descriptor["mediaType"]
            .as_str()
            .unwrap_or("application/vnd.oci.image.manifest.v1+json")
            .to_owned();
        let Some(name) = descriptor["annotations"]["io.containerd.image.name"].as_str() else {
            continue;
        };
        let (repository, tag) = repository_and_tag(name).ok_or_else(|| {
            Error::Invalid(format!(
                "{}: image name {name:?} is not fully qualified",
                archive.display()
            ))
        })?;
        let registry = Registry { address };
        names.push(name.to_owned());
        if registry.manifest_digest(repository, tag)?.as_deref() == Some(digest.as_str()) {
            continue;
        }
        let manifest = read_entry(archive, &blob_path(&digest))?;
        let parsed: serde_json::Value = serde_json::from_slice(&manifest)
            .map_err(|e| Error::Invalid(format!("{}: manifest: {e}", archive.display())))?;
        let blobs = std::iter::once(&parsed["config"])
            .chain(parsed["layers"].as_array().into_iter().flatten())
            .filter_map(|blob| blob["digest"].as_str());
        for blob in blobs {
            if !registry.has_blob(repository, blob)? {
                registry.upload_blob(repository, blob, archive)?;
            }
        }
        registry.put_manifest(repository, tag, &media_type, &manifest)?;
    }
    Ok(names)
}

fn blob_path(digest: &str) -> String {
    format!("blobs/{}", digest.replacen(':', "/", 1))
}

/// The bytes of one file of a tar archive.
fn read_entry(archive: &Path, path: &str) -> Result<Vec<u8>, Error> {
    let mut entries = open_tar(archive)?;
    let mut found = None;
    visit_entries(&mut entries, archive, |entry_path, entry| {
        if entry_path == path {
            let mut bytes = Vec::new();
            entry
                .read_to_end(&mut bytes)
                .map_err(Error::io("reading", archive))?;
            found = Some(bytes);
            return Ok(true);
        }
        Ok(false)
    })?;
    found.ok_or_else(|| Error::Invalid(format!("{} has no {path}", archive.display())))
}

fn open_tar(archive: &Path) -> Result<tar::Archive<File>, Error> {
    Ok(tar::Archive::new(
        File::open(archive).map_err(Error::io("opening", archive))?,
    ))
}

/// Calls `visit` with each entry's path until it returns true.
fn visit_entries(
    entries: &mut tar::Archive<File>,
    archive: &Path,
    mut visit: impl FnMut(&str, &mut tar::Entry<'_, File>) -> Result<bool, Error>,
) -> Result<(), Error> {
    for entry in entries.entries().map_err(Error::io("reading", archive))? {
        let mut entry = entry.map_err(Error::io("reading", archive))?;
        let path = entry
            .path()
            .map_err(Error::io("reading", archive))?
            .to_string_lossy()
            .trim_start_matches("./")
            .to_owned();
        if visit(&path, &mut entry)? {
            break;
        }
    }
    Ok(())
}

struct Registry<'a> {
    address: &'a str,
}

/// One HTTP/1.1 answer: the status and the headers (lower-cased names).
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

impl Registry<'_> {
    fn manifest_digest(&self, repository: &str, tag: &str) -> Result<Option<String>, Error> {
        let answer = self.request(
            "HEAD",
            &format!("/v2/{repository}/manifests/{tag}"),
            &[(
                "Accept",
                "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json",
            )],
            Body::None,
        )?;
        Ok((answer.status == 200)
            .then(|| answer.header("docker-content-digest").map(str::to_owned))
            .flatten())
    }

    fn has_blob(&self, repository: &str, digest: &str) -> Result<bool, Error> {
        let answer = self.request(
            "HEAD",
            &format!("/v2/{repository}/blobs/{digest}"),
            &[],
            Body::None,
        )?;
        Ok(answer.status == 200)
    }

    /// A monolithic upload: POST opens it, PUT sends the whole blob with its digest.
    fn upload_blob(&self, repository: &str, digest: &str, archive: &Path) -> Result<(), Error> {
        let opened = self.request(
            "POST",
            &format!("/v2/{repository}/blobs/uploads/"),
            &[],
            Body::Bytes(&[]),
        )?;
        let location = match (opened.status, opened.header("location")) {
            (202, Some(location)) => location.to_owned(),
            (status, _) => return Err(self.refused("opening an upload", repository, status)),
        };
        // The location may be absolute; only its path and query go in the request line.
        let location = match location.split_once("://") {
            Some((_, rest)) => rest
                .find('/')
                .map_or("/".to_owned(), |at| rest[at..].to_owned()),
            None => location,
        };
        let separator = if location.contains('?') { '&' } else { '?' };
        let target = format!("{location}{separator}digest={digest}");
        let mut entries = open_tar(archive)?;
        let wanted = blob_path(digest);
        let mut status = None;
        visit_entries(&mut entries, archive, |path, entry| {
            if path != wanted {
                return Ok(false);
            }
            let size = entry
                .header()
                .size()
                .map_err(Error::io("reading", archive))?;
            status = Some(
                self.request("PUT", &target, &[], Body::Reader(entry, size))?
                    .status,
            );
            Ok(true)
        })?;
        match status {
            Some(201) => Ok(()),
            Some(status) => Err(self.refused("uploading a blob", repository, status)),
            None => Err(Error::Invalid(format!(
                "{} has no {wanted}",
                archive.display()
            ))),
        }
    }

    fn put_manifest(
        &self,
        repository: &str,
        tag: &str,
        media_type: &str,
        manifest: &[u8],
    ) -> Result<(), Error> {
        let answer = self.request(
            "PUT",
            &format!("/v2/{repository}/manifests/{tag}"),
            &[("Content-Type", media_type)],
            Body::Bytes(manifest),
        )?;
        match answer.status {
            201 => Ok(()),
            status => Err(self.refused("pushing a manifest", repository, status)),
        }
    }

    fn refused(&self, what: &str, repository: &str, status: u16) -> Error {
        Error::Invalid(format!(
            "the image registry at {} answered {status} {what} for {repository}",
            self.address
        ))
    }

    /// One request on a connection of its own (`Connection: close`); the answer's body is read
    /// to its end and dropped (the registry API's answers here carry their news in headers).
    fn request(
        &self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: Body<'_>,
    ) -> Result<Answer, Error> {
        let io = |action| Error::io(action, format!("http://{}{target}", self.address));
        let mut stream = TcpStream::connect(self.address).map_err(io("connecting to"))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .map_err(io("configuring"))?;
        let mut head = format!(
            "{method} {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.address
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        match &body {
            Body::None => {}
            Body::Bytes(bytes) => head.push_str(&format!("Content-Length: {}\r\n", bytes.len())),
            Body::Reader(_, size) => head.push_str(&format!(
                "Content-Type: application/octet-stream\r\nContent-Length: {size}\r\n"
            )),
        }
        head.push_str("\r\n");
        stream
            .write_all(head.as_bytes())
            .map_err(io("writing to"))?;
        match body {
            Body::None => {}
            Body::Bytes(bytes) => stream.write_all(bytes).map_err(io("writing to"))?,
            Body::Reader(reader, _) => {
                std::io::copy(reader, &mut stream).map_err(io("writing to"))?;
            }
        }
        stream.flush().map_err(io("writing to"))?;
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).map_err(io("reading from"))?;
        let status = line
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "the image registry at {} answered {line:?}",
                    self.address
                ))
            })?;
        let mut answer = Answer {
            status,
            headers: Vec::new(),
        };
        loop {
            line.clear();
            reader.read_line(&mut line).map_err(io("reading from"))?;
            let Some((name, value)) = line.trim_end().split_once(':') else {
                break;
            };
            answer
                .headers
                .push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
        if method != "HEAD" {
            std::io::copy(&mut reader, &mut std::io::sink()).map_err(io("reading from"))?;
        }
        Ok(answer)
    }
}

enum Body<'a> {
    None,
    Bytes(&'a [u8]),
    Reader(&'a mut dyn Read, u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_qualified_as_containerd_does() {
        assert_eq!(qualified_name("nginx"), "docker.io/library/nginx:latest");
        assert_eq!(
            qualified_name("app-operator:v1"),
            "docker.io/library/app-operator:v1"
        );
        assert_eq!(qualified_name("me/op:v1"), "docker.io/me/op:v1");
        assert_eq!(
            qualified_name("quay.io/coreos/etcd:v3.5.35"),
            "quay.io/coreos/etcd:v3.5.35"
        );
        assert_eq!(
            qualified_name("localhost:5000/op"),
            "localhost:5000/op:latest"
        );
    }

    #[test]
    fn a_name_maps_to_the_repository_the_registry_serves_for_every_host() {
        assert_eq!(
            repository_and_tag("docker.io/library/nginx:1.22"),
            Some(("library/nginx", "1.22"))
        );
        assert_eq!(
            repository_and_tag("registry.k8s.io/pause:3.10.1"),
            Some(("pause", "3.10.1"))
        );
        assert_eq!(
            repository_and_tag("registry.k8s.io/coredns/coredns:v1.13.1"),
            Some(("coredns/coredns", "v1.13.1"))
        );
        assert_eq!(
            repository_and_tag("localhost:5000/x/y:z"),
            Some(("x/y", "z"))
        );
        // Short names are normalised by containerd first; here they are refused.
        assert_eq!(repository_and_tag("nginx:latest"), None);
        assert_eq!(repository_and_tag("library/nginx:latest"), None);
        assert_eq!(repository_and_tag("docker.io/library/nginx"), None);
    }
}
