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
    let sql = "select count(*) || ' ' || md5(string_agg(md5(payload), '' order by id)) from bench";
    answer(store, sql, "reading the rows back").await
}

/// The database's size on disk, in MiB (reported beside the steps).
pub async fn size_mib(store: &PostgresStore) -> Result<f64> {
    let sql = "select pg_database_size(current_database())";
    let bytes: f64 = answer(store, sql, "asking the database's size").await?;
    Ok(bytes / (1024.0 * 1024.0))
}

/// The server's major version.
pub async fn major_version(store: &PostgresStore) -> Result<String> {
    let number: u32 = answer(
        store,
        "show server_version_num",
        "asking the server's version",
    )
    .await?;
    Ok((number / 10000).to_string())
}

/// The one value `sql` answers, parsed; `what` names the question in an error.
async fn answer<T>(store: &PostgresStore, sql: &str, what: &str) -> Result<T>
where
    T: std::str::FromStr,
    T::Err: std::error::Error + Send + Sync + 'static,
{
    let text = store
        .psql(sql)
        .await
        .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    text.trim()
        .parse()
        .with_context(|| format!("{what}: {:?}", text.trim()))
}

/// `store` holds exactly the rows of `expected` (a [`digest`]), read back after `what`.
pub async fn holds(store: &PostgresStore, expected: &str, what: &str) -> Result<()> {
    let read = digest(store).await?;
    if read != expected {
        bail!("after {what} the rows read back as {read}, not {expected}");
    }
    Ok(())
}
