//! etcd release versions: `3.6.16`, `v3.6.16`, `3.6.0-rc.1`.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    /// A pre-release (`rc.1`) sorts before its release.
    pre: Option<String>,
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (&self.pre, &other.pre) {
                (None, None) => std::cmp::Ordering::Equal,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (Some(_), None) => std::cmp::Ordering::Less,
                (Some(a), Some(b)) => a.cmp(b),
            })
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Version {
    /// Parses a version with or without the leading `v` (the schema admits only these forms).
    pub fn parse(text: &str) -> Option<Version> {
        let text = text.trim().trim_start_matches('v');
        let (release, pre) = match text.split_once('-') {
            Some((release, pre)) => (release, Some(pre.to_owned())),
            None => (text, None),
        };
        let mut numbers = release.split('.').map(|n| n.parse::<u64>().ok());
        let version = Version {
            major: numbers.next()??,
            minor: numbers.next()??,
            patch: numbers.next()??,
            pre,
        };
        numbers.next().is_none().then_some(version)
    }

    /// etcd upgrades one minor release at a time (3.5 → 3.6, not 3.4 → 3.6), never across majors.
    pub fn may_upgrade_to(&self, target: &Version) -> bool {
        self.major == target.major && target.minor <= self.minor + 1 && target >= self
    }

    /// The flag that skips matching a peer's address to its certificate's names: experimental
    /// until 3.6 (which still takes the old name, deprecated).
    pub fn peer_skip_client_san_flag(&self) -> &'static str {
        if (self.major, self.minor) >= (3, 6) {
            "--peer-skip-client-san-verification=true"
        } else {
            "--experimental-peer-skip-client-san-verification=true"
        }
    }

    /// Serves `/livez` (a local serializable read, no leader needed): since 3.5.11 and 3.4.29.
    pub fn serves_livez(&self) -> bool {
        let since = match (self.major, self.minor) {
            (3, 4) => 29,
            (3, 5) => 11,
            (3, 0..=3) => return false,
            _ => 0,
        };
        self.major >= 3 && self.patch >= since
    }

    /// The image tag etcd publishes the release under.
    pub fn tag(&self) -> String {
        format!("v{self}")
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        match &self.pre {
            Some(pre) => write!(f, "-{pre}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn livez_is_served_since_3_5_11_and_3_4_29() {
        let serves = |text: &str| Version::parse(text).is_some_and(|v| v.serves_livez());
        assert!(serves("3.6.0") && serves("3.5.11") && serves("3.4.29") && serves("3.7.1"));
        assert!(!serves("3.5.10") && !serves("3.4.28") && !serves("3.3.27") && !serves("2.3.8"));
    }

    #[test]
    fn parses_etcd_tags_with_or_without_v() {
        let v = Version::parse("v3.6.16").unwrap();
        assert_eq!((v.major, v.minor, v.patch), (3, 6, 16));
        assert_eq!(Version::parse("3.6.16"), Some(v.clone()));
        assert_eq!(v.tag(), "v3.6.16");
        assert_eq!(
            Version::parse("3.6.0-rc.1").unwrap().to_string(),
            "3.6.0-rc.1"
        );
        for bad in ["3.6", "3.6.x", "", "3.6.1.2", "latest"] {
            assert_eq!(Version::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn upgrades_go_one_minor_release_at_a_time() {
        let v = |t: &str| Version::parse(t).unwrap();
        assert!(v("3.5.21").may_upgrade_to(&v("3.6.16")));
        assert!(v("3.6.1").may_upgrade_to(&v("3.6.16")));
        assert!(!v("3.4.30").may_upgrade_to(&v("3.6.16")));
        assert!(!v("3.6.16").may_upgrade_to(&v("4.0.0")));
        assert!(!v("3.6.16").may_upgrade_to(&v("3.5.21")));
        assert!(v("3.6.16") > v("3.5.21") && v("3.10.0") > v("3.9.9"));
        assert!(v("3.6.0") > v("3.6.0-rc.1"));
    }
}
