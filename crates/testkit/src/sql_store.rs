//! The history checker's [`Store`] for PostgreSQL: rows written and read with `psql` over the
//! network, as any client of the database's Service would.

use std::collections::BTreeMap;

use futures::future::BoxFuture;

use crate::history::Store;

/// The table the rows go to.
const TABLE: &str = "history";

/// A PostgreSQL database reached at `host`.
pub struct PostgresStore {
    host: String,
    user: String,
    password: String,
    database: String,
}

impl PostgresStore {
    pub fn new(host: &str, user: &str, password: &str, database: &str) -> PostgresStore {
        PostgresStore {
            host: host.into(),
            user: user.into(),
            password: password.into(),
            database: database.into(),
        }
    }

    /// Runs `sql` (one statement, values already quoted) and returns its unaligned output.
    pub async fn psql(&self, sql: &str) -> Result<String, String> {
        let out = tokio::process::Command::new("psql")
            .args(["-X", "-Atq", "-v", "ON_ERROR_STOP=1", "-F", "\t", "-c", sql])
            .env("PGHOST", &self.host)
            .env("PGUSER", &self.user)
            .env("PGPASSWORD", &self.password)
            .env("PGDATABASE", &self.database)
            .env("PGCONNECT_TIMEOUT", "3")
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Creates the table the writes go to.
    pub async fn prepare(&self) -> Result<(), String> {
        self.psql(&format!(
            "create table if not exists {TABLE} (k text primary key, v text not null)"
        ))
        .await
        .map(drop)
    }
}

/// `text` as an SQL string literal (the keys and values are the checker's own, but quoting is
/// cheap).
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

impl Store for PostgresStore {
    fn write<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, String>> {
        Box::pin(async move {
            let sql = format!(
                "insert into {TABLE} (k, v) values ({}, {})",
                literal(key),
                literal(value)
            );
            self.psql(&sql).await.map(|_| None)
        })
    }

    fn read_all<'a>(
        &'a self,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<BTreeMap<String, String>, String>> {
        Box::pin(async move {
            let sql = format!(
                "select k, v from {TABLE} where starts_with(k, {})",
                literal(prefix)
            );
            let out = self.psql(&sql).await?;
            out.lines()
                .map(|line| {
                    line.split_once('\t')
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .ok_or_else(|| format!("not a row: {line:?}"))
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_doubled_in_literals() {
        assert_eq!(literal("it's"), "'it''s'");
    }
}
