//! Who may scrape: a TokenReview (else 401) and a SubjectAccessReview for `get` on the path
//! (else 403), each answer cached with controller-runtime's TTLs in a bounded cache.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{
    TokenReview, TokenReviewSpec, TokenReviewStatus, UserInfo,
};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use super::lock;

/// How long a TokenReview's answer is reused, authenticated or not (controller-runtime's
/// `DelegatingAuthenticatorConfig.CacheTTL`).
const AUTHENTICATION_TTL: Duration = Duration::from_secs(60);
/// How long an allowing SubjectAccessReview is reused (controller-runtime's `AllowCacheTTL`).
const ALLOWED_TTL: Duration = Duration::from_secs(5 * 60);
/// How long a denying one is: short, so a newly granted role works soon (`DenyCacheTTL`).
const DENIED_TTL: Duration = Duration::from_secs(30);
/// Entries per cache: callers choose the tokens and paths, so the memory they can pin must be
/// bounded.
const CACHE_CAPACITY: usize = 1024;

/// A cache whose entries expire, holding at most `capacity` of them. Time is passed in, so the
/// expiry is testable.
#[derive(Debug)]
struct TtlCache<K, V> {
    entries: HashMap<K, (V, Instant)>,
    capacity: usize,
}

impl<K: Hash + Eq, V: Clone> TtlCache<K, V> {
    fn new(capacity: usize) -> Self {
        TtlCache {
            entries: HashMap::new(),
            capacity,
        }
    }

    fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        match self.entries.get(key) {
            Some((value, expires)) if now < *expires => Some(value.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&mut self, key: K, value: V, ttl: Duration, now: Instant) {
        // A TTL past the end of time: not worth caching, and adding it would panic.
        let Some(expires) = now.checked_add(ttl) else {
            return;
        };
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (_, expires)| now < *expires);
            // Still full of live answers: drop those that would expire first.
            if self.entries.len() >= self.capacity {
                let soonest = self.entries.values().map(|(_, expires)| *expires).min();
                if let Some(soonest) = soonest {
                    self.entries.retain(|_, (_, expires)| *expires > soonest);
                }
            }
        }
        self.entries.insert(key, (value, expires));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The TokenReview cache key: a SHA-256 of the token, so the cache never holds the credential.
fn token_key(token: &str) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
        .as_ref()
        .to_vec()
}

/// A TokenReview's answer: the identity if authenticated, and whether the answer may be cached.
/// An `error` without an identity may be transient (an authentication webhook that is down), so
/// as in Kubernetes' delegating authenticator it is not reused.
fn token_verdict(status: Option<TokenReviewStatus>) -> (Option<UserInfo>, bool) {
    let status = status.unwrap_or_default();
    let user = status.user.filter(|_| status.authenticated == Some(true));
    let definite = user.is_some() || status.error.as_deref().is_none_or(str::is_empty);
    (user, definite)
}

/// Everything a SubjectAccessReview is asked about: equal keys get the same answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AccessKey {
    user: Option<String>,
    uid: Option<String>,
    groups: Option<Vec<String>>,
    extra: Option<BTreeMap<String, Vec<String>>>,
    verb: String,
    path: String,
}

/// The API client and the cached answers of the reviews it made.
struct Reviewer {
    client: Client,
    tokens: Mutex<TtlCache<Vec<u8>, Option<UserInfo>>>,
    access: Mutex<TtlCache<AccessKey, bool>>,
}

impl Reviewer {
    fn new(client: Client) -> Self {
        Reviewer {
            client,
            tokens: Mutex::new(TtlCache::new(CACHE_CAPACITY)),
            access: Mutex::new(TtlCache::new(CACHE_CAPACITY)),
        }
    }

    async fn review(&self, token: String, path: &str, verb: &str) -> Result<Verdict, kube::Error> {
        let Some(user) = self.authenticate(token).await? else {
            return Ok(Verdict::Unauthenticated);
        };
        let key = AccessKey {
            user: user.username,
            uid: user.uid,
            groups: user.groups,
            extra: user.extra,
            verb: verb.to_owned(),
            path: path.to_owned(),
        };
        Ok(if self.authorize(key).await? {
            Verdict::Allowed
        } else {
            Verdict::Forbidden
        })
    }

    async fn authenticate(&self, token: String) -> Result<Option<UserInfo>, kube::Error> {
        let key = token_key(&token);
        if let Some(known) = lock(&self.tokens).get(&key, Instant::now()) {
            return Ok(known);
        }
        let token_review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &token_review)
            .await?;
        let (user, definite) = token_verdict(reviewed.status);
        if definite {
            lock(&self.tokens).insert(key, user.clone(), AUTHENTICATION_TTL, Instant::now());
        }
        Ok(user)
    }

    async fn authorize(&self, key: AccessKey) -> Result<bool, kube::Error> {
        if let Some(known) = lock(&self.access).get(&key, Instant::now()) {
            return Ok(known);
        }
        let access_review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: key.user.clone(),
                groups: key.groups.clone(),
                uid: key.uid.clone(),
                extra: key.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(key.path.clone()),
                    verb: Some(key.verb.clone()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access_review)
            .await?;
        let allowed = decided.status.is_some_and(|s| s.allowed);
        let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
        lock(&self.access).insert(key, allowed, ttl, Instant::now());
        Ok(allowed)
    }
}

/// Puts the TokenReview/SubjectAccessReview check in front of `routes`.
pub fn authorized(routes: Router, client: Client) -> Router {
    let reviewer = Arc::new(Reviewer::new(client));
    routes.layer(middleware::from_fn_with_state(reviewer, authorize))
}

async fn authorize(
    State(reviewer): State<Arc<Reviewer>>,
    request: Request,
    next: Next,
) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::to_owned);
    let Some(token) = token else {
        return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
    };
    let verb = request.method().as_str().to_lowercase();
    match reviewer.review(token, request.uri().path(), &verb).await {
        Ok(Verdict::Allowed) => next.run(request).await,
        Ok(Verdict::Unauthenticated) => (StatusCode::UNAUTHORIZED, "Unauthorized").into_response(),
        Ok(Verdict::Forbidden) => (StatusCode::FORBIDDEN, "Forbidden").into_response(),
        Err(error) => {
            tracing::warn!(%error, "could not review a metrics request");
            (StatusCode::INTERNAL_SERVER_ERROR, "authorization failed").into_response()
        }
    }
}

enum Verdict {
    Allowed,
    Unauthenticated,
    Forbidden,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn an_answer_is_reused_until_its_ttl_and_not_after() {
        let start = Instant::now();
        let mut cache = TtlCache::new(8);
        cache.insert("allowed", true, ALLOWED_TTL, start);
        cache.insert("denied", false, DENIED_TTL, start);
        assert_eq!(cache.get(&"allowed", start), Some(true));
        assert_eq!(
            cache.get(&"denied", start + DENIED_TTL - SECOND),
            Some(false)
        );
        assert_eq!(cache.get(&"denied", start + DENIED_TTL), None);
        assert_eq!(cache.get(&"allowed", start + DENIED_TTL), Some(true));
        assert_eq!(
            cache.get(&"allowed", start + ALLOWED_TTL - SECOND),
            Some(true)
        );
        assert_eq!(cache.get(&"allowed", start + ALLOWED_TTL), None);
        assert_eq!(cache.len(), 0, "expired entries are dropped when looked up");
        assert_eq!(cache.get(&"never", start), None);
    }

    #[test]
    fn a_new_answer_replaces_the_old_one_and_its_expiry() {
        let start = Instant::now();
        let mut cache = TtlCache::new(8);
        cache.insert("user", false, DENIED_TTL, start);
        cache.insert("user", true, ALLOWED_TTL, start + 10 * SECOND);
        assert_eq!(cache.get(&"user", start + DENIED_TTL + SECOND), Some(true));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_full_cache_drops_expired_answers_first_then_the_soonest_to_expire() {
        let start = Instant::now();
        let mut cache = TtlCache::new(3);
        cache.insert(1, (), 10 * SECOND, start);
        cache.insert(2, (), 20 * SECOND, start);
        cache.insert(3, (), 30 * SECOND, start);
        // 1 has expired: it goes, the live ones stay.
        cache.insert(4, (), 30 * SECOND, start + 15 * SECOND);
        assert_eq!(cache.len(), 3);
        let now = start + 16 * SECOND;
        assert!(cache.get(&1, now).is_none());
        assert!(cache.get(&2, now).is_some() && cache.get(&3, now).is_some());
        // None has expired: 2 would have first, so it makes room.
        cache.insert(5, (), 30 * SECOND, now);
        assert_eq!(cache.len(), 3);
        assert!(cache.get(&2, now).is_none());
        assert!([3, 4, 5].iter().all(|k| cache.get(k, now).is_some()));
        // Updating a present key never evicts.
        cache.insert(3, (), 30 * SECOND, now);
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn random_tokens_cannot_grow_the_cache_past_its_capacity() {
        let start = Instant::now();
        let mut cache = TtlCache::new(CACHE_CAPACITY);
        for i in 0..10 * CACHE_CAPACITY {
            cache.insert(
                token_key(&format!("token-{i}")),
                None::<UserInfo>,
                AUTHENTICATION_TTL,
                start,
            );
            assert!(cache.len() <= CACHE_CAPACITY);
        }
    }

    #[test]
    fn a_ttl_past_the_end_of_time_is_not_cached_rather_than_panicking() {
        let mut cache = TtlCache::new(2);
        cache.insert("k", 1, Duration::MAX, Instant::now());
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn the_token_key_is_a_digest_not_the_token() {
        let key = token_key("secret-token");
        assert_eq!(key.len(), 32);
        assert_eq!(key, token_key("secret-token"));
        assert_ne!(key, token_key("secret-tokem"));
        assert!(!key.windows(6).any(|w| w == b"secret"));
    }

    #[test]
    fn only_definite_token_reviews_are_cached() {
        let user = UserInfo {
            username: Some("system:serviceaccount:ns:reader".to_owned()),
            ..UserInfo::default()
        };
        let status = |authenticated, error: Option<&str>| {
            Some(TokenReviewStatus {
                authenticated: Some(authenticated),
                error: error.map(str::to_owned),
                user: Some(user.clone()),
                ..TokenReviewStatus::default()
            })
        };
        assert_eq!(
            token_verdict(status(true, None)),
            (Some(user.clone()), true)
        );
        assert_eq!(token_verdict(status(false, None)), (None, true));
        assert_eq!(token_verdict(status(false, Some(""))), (None, true));
        assert_eq!(
            token_verdict(status(false, Some("webhook unavailable"))),
            (None, false)
        );
        assert_eq!(token_verdict(None), (None, true));
    }
}
