//! Deliberate defects that the fault suite switches on to show that its checks can fail: each one
//! is a bug an operator could plausibly ship, and the fault table in docs/architecture.md names
//! the rows that catch it. They exist only in a build with the `mutations` feature
//! (`APP_OPERATOR_CHAOS_MUTATE=1 cargo xtask chaos` makes one), switched on per process by
//! `APP_OPERATOR_MUTATIONS=<name>,...`; in every other build [`active`] is a constant `false` and
//! the defects compile away.

/// A defect, by the name `APP_OPERATOR_MUTATIONS` lists.
#[derive(Clone, Copy, PartialEq, Eq, Debug, strum::IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum Mutation {
    /// AppCluster counts only its Ready Pods toward `size` (the starting ones are forgotten).
    CountOnlyReadyPods,
    /// A MyApp whose status says Ready at its generation is not reconciled (its children are
    /// trusted to be as they were).
    SkipReadyAtGeneration,
    /// A failed watch ends the process instead of being retried.
    WatchErrorsFatal,
    /// A lease counts as expired by the holder's `renewTime` on our clock, not by when we saw it
    /// change.
    LeaseExpiryFromRenewTime,
    /// The client sends no HTTP/2 pings: a silently dead connection is never dropped.
    NoKeepAlive,
    /// A 429 (API Priority and Fairness) is retried neither by the client nor by the controller:
    /// the object waits for a change.
    ThrottledIsPermanent,
}

/// Whether `mutation` is switched on in this process.
#[cfg(feature = "mutations")]
pub fn active(mutation: Mutation) -> bool {
    use std::sync::OnceLock;
    static ACTIVE: OnceLock<Vec<String>> = OnceLock::new();
    let name: &'static str = mutation.into();
    ACTIVE
        .get_or_init(|| {
            let list = std::env::var("APP_OPERATOR_MUTATIONS").unwrap_or_default();
            let active: Vec<String> = list.split(',').map(str::to_owned).collect();
            tracing::warn!(
                ?active,
                "a build with deliberate defects (the mutations feature)"
            );
            active
        })
        .iter()
        .any(|on| on == name)
}

/// Whether `mutation` is switched on in this process: never, in a build without the
/// `mutations` feature.
#[cfg(not(feature = "mutations"))]
pub const fn active(_mutation: Mutation) -> bool {
    false
}
