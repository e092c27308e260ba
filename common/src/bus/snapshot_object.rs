//! Policy snapshots in the run's NATS object store (`caprl-<run>-snapshots`), one object per
//! version: what every reader fetches its own copy of when `runtime.snapshot_dir` is not set.

use std::time::Duration;

use async_nats::jetstream::object_store::{self, DeleteErrorKind, GetErrorKind, ObjectStore};
use bytes::Bytes;
use tokio::io::AsyncReadExt;

use super::nats::deadline;
use super::{BusError, BusResult, Checksum, SnapshotMeta};

/// The object holding snapshot `version`.
fn object_name(version: u64) -> String {
    format!("policy-v{version}")
}

/// Stores snapshot `version` in the run's object store (in chunks of at most `max_payload`)
/// and describes it.
pub(super) async fn put(
    objects: &ObjectStore,
    max_payload: usize,
    timeout: Duration,
    version: u64,
    data: &Bytes,
) -> BusResult<SnapshotMeta> {
    // The object store waits for JetStream's ack of every chunk in turn: its default
    // 128 KiB chunks made a 226 MB snapshot 1,800 round trips.
    let object = object_store::ObjectMetadata {
        name: object_name(version),
        chunk_size: Some(max_payload.min(SNAPSHOT_CHUNK_BYTES)),
        ..Default::default()
    };
    let mut reader: &[u8] = data;
    let info = deadline("put snapshot", timeout, objects.put(object, &mut reader))
        .await?
        .map_err(|e| BusError::js("put snapshot", e))?;
    // The store hashed the bytes as it took them: its digest is the meta's checksum.
    let checksum = match info.digest.as_deref().and_then(digest_hex) {
        Some(sha256) if info.size == data.len() => Checksum::Sha256(sha256),
        _ => Checksum::sha256(data),
    };
    Ok(SnapshotMeta {
        version,
        checksum,
        bytes: data.len() as u64,
        file: None,
    })
}

/// Fetches the snapshot `meta` describes from the run's object store and checks it.
pub(super) async fn get(
    objects: &ObjectStore,
    timeout: Duration,
    meta: &SnapshotMeta,
) -> BusResult<Bytes> {
    let work = async {
        let mut object = match objects.get(object_name(meta.version)).await {
            Ok(object) => object,
            Err(e) if e.kind() == GetErrorKind::NotFound => {
                return Err(BusError::SnapshotMissing {
                    version: meta.version,
                })
            }
            Err(e) => return Err(BusError::js("get snapshot", e)),
        };
        let mut data = Vec::with_capacity(object.info().size);
        // The reader checks the bytes against the object's digest when it reaches the end.
        let checked = object.info().digest.is_some()
            && object.info().digest.as_deref() == store_digest(meta.checksum.hex()).as_deref();
        object
            .read_to_end(&mut data)
            .await
            .map_err(|e| BusError::js("get snapshot", e))?;
        Ok((data, checked))
    };
    let (data, checked) = deadline("get snapshot", timeout, work).await??;
    // An object whose digest is the meta's and that read to its end is the meta's
    // snapshot; anything else is hashed here and compared.
    if !checked || data.len() as u64 != meta.bytes {
        meta.verify(&data)?;
    }
    Ok(Bytes::from(data))
}

/// Removes the object of snapshot `version`; an absent one is no error.
pub(super) async fn delete(
    objects: &ObjectStore,
    timeout: Duration,
    version: u64,
) -> BusResult<()> {
    match deadline(
        "delete snapshot",
        timeout,
        objects.delete(object_name(version)),
    )
    .await?
    {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == DeleteErrorKind::NotFound => Ok(()),
        Err(e) => Err(BusError::js("delete snapshot", e)),
    }
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
