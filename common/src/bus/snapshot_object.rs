//! Policy snapshots in the run's NATS object store (`caprl-<run>-snapshots`), one object per
//! version, whole or as a delta ([`Store`], the chains' [`Versions`] there): what every reader
//! fetches its own copy of (or one per host: `snapshot_cache`) when `runtime.snapshot_dir` is not
//! set.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream::object_store::{self, DeleteErrorKind, GetErrorKind, ObjectStore};
use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::io::AsyncReadExt;

use super::error::deadline;
use super::snapshot_chain::Versions;
use super::{BusError, BusResult, Checksum, SnapshotMeta};

/// The run's object store, with the chunk size and the deadline of a whole snapshot's transfer.
pub(super) struct Store<'a> {
    pub(super) objects: &'a ObjectStore,
    pub(super) max_payload: usize,
    pub(super) timeout: Duration,
}

impl Versions for Store<'_> {
    fn put_whole<'a>(
        &'a self,
        version: u64,
        data: &'a Bytes,
    ) -> BoxFuture<'a, BusResult<SnapshotMeta>> {
        Box::pin(put(
            self.objects,
            self.max_payload,
            self.timeout,
            version,
            data,
        ))
    }

    fn put_delta(&self, version: u64, delta: Vec<u8>) -> BoxFuture<'_, BusResult<Option<PathBuf>>> {
        Box::pin(async move {
            let name = delta_name(version);
            store(self.objects, self.max_payload, self.timeout, name, &delta).await?;
            Ok(None)
        })
    }

    fn get_whole<'a>(&'a self, meta: &'a SnapshotMeta) -> BoxFuture<'a, BusResult<Bytes>> {
        Box::pin(get(self.objects, self.timeout, meta))
    }

    fn get_unchecked(&self, version: u64, delta: bool) -> BoxFuture<'_, BusResult<Vec<u8>>> {
        Box::pin(get_unchecked(self.objects, self.timeout, version, delta))
    }

    fn delete(&self, version: u64) -> BoxFuture<'_, BusResult<()>> {
        Box::pin(delete(self.objects, self.timeout, version))
    }
}

/// The object holding snapshot `version` whole.
fn object_name(version: u64) -> String {
    format!("policy-v{version}")
}

/// The object holding snapshot `version` as a delta against the version before it in its
/// chain (`SnapshotMeta::chain`).
fn delta_name(version: u64) -> String {
    format!("policy-v{version}-delta")
}

/// Stores snapshot `version` whole in the run's object store and describes it.
async fn put(
    objects: &ObjectStore,
    max_payload: usize,
    timeout: Duration,
    version: u64,
    data: &Bytes,
) -> BusResult<SnapshotMeta> {
    let digest = store(objects, max_payload, timeout, object_name(version), data).await?;
    // The store hashed the bytes as it took them: its digest is the meta's checksum.
    let checksum = match digest {
        Some(sha256) => Checksum::Sha256(sha256),
        None => Checksum::sha256(data),
    };
    Ok(SnapshotMeta {
        version,
        checksum,
        bytes: data.len() as u64,
        file: None,
        chain: Vec::new(),
    })
}

/// Stores `data` as object `name` (in chunks of at most `max_payload`); the store's SHA-256
/// of it, hex, when it reports one for all of it.
async fn store(
    objects: &ObjectStore,
    max_payload: usize,
    timeout: Duration,
    name: String,
    data: &[u8],
) -> BusResult<Option<String>> {
    // The object store waits for JetStream's ack of every chunk in turn: its default
    // 128 KiB chunks made a 226 MB snapshot 1,800 round trips.
    let object = object_store::ObjectMetadata {
        name,
        chunk_size: Some(max_payload.min(SNAPSHOT_CHUNK_BYTES)),
        ..Default::default()
    };
    let mut reader: &[u8] = data;
    let info = deadline("put snapshot", timeout, objects.put(object, &mut reader))
        .await?
        .map_err(|e| BusError::js("put snapshot", e))?;
    Ok(info
        .digest
        .as_deref()
        .and_then(digest_hex)
        .filter(|_| info.size == data.len()))
}

/// Fetches the snapshot `meta` describes whole from the run's object store and checks it.
async fn get(objects: &ObjectStore, timeout: Duration, meta: &SnapshotMeta) -> BusResult<Bytes> {
    let expected = store_digest(meta.checksum.hex());
    let (data, checked) = fetch(
        objects,
        timeout,
        object_name(meta.version),
        meta.version,
        expected,
    )
    .await?;
    // An object whose digest is the meta's and that read to its end is the meta's
    // snapshot; anything else is hashed here and compared.
    if !checked || data.len() as u64 != meta.bytes {
        meta.verify(&data)?;
    }
    Ok(Bytes::from(data))
}

/// Fetches version `version` whole, or its delta (`delta`), unchecked: a delta checks its base
/// and what it rebuilds itself.
async fn get_unchecked(
    objects: &ObjectStore,
    timeout: Duration,
    version: u64,
    delta: bool,
) -> BusResult<Vec<u8>> {
    let name = if delta {
        delta_name(version)
    } else {
        object_name(version)
    };
    Ok(fetch(objects, timeout, name, version, None).await?.0)
}

/// The bytes of object `name` (of snapshot `version`), and whether the store checked them
/// against the digest `expected` as they were read.
async fn fetch(
    objects: &ObjectStore,
    timeout: Duration,
    name: String,
    version: u64,
    expected: Option<String>,
) -> BusResult<(Vec<u8>, bool)> {
    let work = async {
        let mut object = match objects.get(name).await {
            Ok(object) => object,
            Err(e) if e.kind() == GetErrorKind::NotFound => {
                return Err(BusError::SnapshotMissing { version })
            }
            Err(e) => return Err(BusError::js("get snapshot", e)),
        };
        let mut data = Vec::with_capacity(object.info().size);
        // The reader checks the bytes against the object's digest when it reaches the end.
        let checked = object.info().digest.is_some() && object.info().digest == expected;
        object
            .read_to_end(&mut data)
            .await
            .map_err(|e| BusError::js("get snapshot", e))?;
        Ok((data, checked))
    };
    deadline("get snapshot", timeout, work).await?
}

/// Removes the objects of snapshot `version`, whole and as a delta; absent ones are no error.
pub(super) async fn delete(
    objects: &ObjectStore,
    timeout: Duration,
    version: u64,
) -> BusResult<()> {
    for name in [object_name(version), delta_name(version)] {
        match deadline("delete snapshot", timeout, objects.delete(name)).await? {
            Ok(()) => {}
            Err(e) if e.kind() == DeleteErrorKind::NotFound => {}
            Err(e) => return Err(BusError::js("delete snapshot", e)),
        }
    }
    Ok(())
}

/// The object store's digest (`SHA-256=<base64url>`) of a snapshot whose hex sha256 is `hex`.
fn store_digest(hex: &str) -> Option<String> {
    let bytes = hex::decode(hex).ok()?;
    Some(format!(
        "SHA-256={}",
        data_encoding::BASE64URL.encode(&bytes)
    ))
}

/// The hex sha256 in an object store digest.
fn digest_hex(digest: &str) -> Option<String> {
    let encoded = digest.strip_prefix("SHA-256=")?;
    let bytes = data_encoding::BASE64URL.decode(encoded.as_bytes()).ok()?;
    (bytes.len() == 32).then(|| hex::encode(bytes))
}

/// The largest chunk a snapshot is stored in (less where the server's `max_payload` is less).
const SNAPSHOT_CHUNK_BYTES: usize = 4 << 20;

#[cfg(test)]
mod tests {
    use super::{digest_hex, store_digest};

    #[test]
    fn object_store_digests_and_hex_sha256_convert_both_ways() {
        // sha256("abc"), as nats-server's object store writes it and as a meta holds it.
        let hex = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        let digest = "SHA-256=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0=";
        assert_eq!(store_digest(hex).as_deref(), Some(digest));
        assert_eq!(digest_hex(digest).as_deref(), Some(hex));
        assert_eq!(
            digest_hex("MD5=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0="),
            None
        );
        assert_eq!(digest_hex("SHA-256=not base64"), None);
        assert_eq!(digest_hex("SHA-256=YWJj"), None, "not 32 bytes");
        assert_eq!(store_digest("not hex"), None);
    }
}
