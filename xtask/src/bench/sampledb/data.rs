//! The database the SampleDB round backs up, restores and upgrades: [`ROWS`] rows of hex text
//! (about 1 GiB on disk, little of it compressible), written with one `insert`, and read back as
//! a count and a digest of every row in order.

use anyhow::{Context, Result, bail};
use testkit::sql_store::PostgresStore;

/// About 1 GiB: a row holds 512 characters of hex text and some 60 bytes of overhead.
pub const ROWS: u64 = 1_800_000;

/// Creates the table and writes every row (not timed).
pub async fn fill(store: &PostgresStore) -> Result<()> {
    store
        .psql(&format!(
            "create table bench (id bigint primary key, payload text not null); \
             insert into bench select g, \
               (select string_agg(md5(g::text || '/' || i), '') from generate_series(1, 16) i) \
             from generate_series(1, {ROWS}) g"
        ))
        .await
        .map_err(|e| anyhow::anyhow!("writing {ROWS} rows: {e}"))
        .map(drop)
}

/// The number of rows and the MD5 of every row's MD5, in order: equal only if every row is.
pub async fn digest(store: &PostgresStore) -> Result<String> {
    let digest = store
        .psql("select count(*) || ' ' || md5(string_agg(md5(payload), '' order by id)) from bench")
        .await
        .map_err(|e| anyhow::anyhow!("reading the rows back: {e}"))?;
    Ok(digest.trim().to_owned())
}

/// The database's size on disk, in MiB (reported beside the steps).
pub async fn size_mib(store: &PostgresStore) -> Result<f64> {
    let bytes = store
        .psql("select pg_database_size(current_database())")
        .await
        .map_err(|e| anyhow::anyhow!("asking the database's size: {e}"))?;
    let bytes: f64 = bytes.trim().parse().context("pg_database_size")?;
    Ok(bytes / (1024.0 * 1024.0))
}

/// The server's major version.
pub async fn major_version(store: &PostgresStore) -> Result<String> {
    let number = store
        .psql("show server_version_num")
        .await
        .map_err(|e| anyhow::anyhow!("asking the server's version: {e}"))?;
    let number: u32 = number.trim().parse().context("server_version_num")?;
    Ok((number / 10000).to_string())
}

/// `store` holds exactly the rows of `expected` (a [`digest`]), read back after `what`.
pub async fn holds(store: &PostgresStore, expected: &str, what: &str) -> Result<()> {
    let read = digest(store).await?;
    if read != expected {
        bail!("after {what} the rows read back as {read}, not {expected}");
    }
    Ok(())
}
