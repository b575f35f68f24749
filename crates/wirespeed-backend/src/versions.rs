//! Triton's numbered version folders and `version_policy`.
//!
//! A model folder either holds its model files beside `config.toml` (the
//! flat layout: one version, `version` in the config, `"1"` unless set), or
//! numbered folders, one per version, as Triton lays a repository out:
//!
//! ```text
//! models/titanic/config.toml
//! models/titanic/1/model.json
//! models/titanic/2/model.json
//! ```
//!
//! Then the config's files (`model_file`, ...) are relative to each version
//! folder, and `version_policy` chooses the versions served: the latest N
//! (by number; 1 unless set), all, or specific ones, as Triton's field of
//! the same name. Both spellings are taken: the short one of TOML
//! (`version_policy = { latest = 2 }`, `{ all = true }`,
//! `{ specific = [1, 3] }`) and Triton's (`{ latest = { num_versions = 2 } }`,
//! `{ all = {} }`, `{ specific = { versions = [1, 3] } }`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Which of a model's numbered versions are served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionPolicy {
    /// The `n` highest-numbered versions.
    Latest(usize),
    /// Every version.
    All,
    /// These versions, each of which must have a folder.
    Specific(Vec<u64>),
}

impl Default for VersionPolicy {
    /// Triton's default: the latest version.
    fn default() -> VersionPolicy {
        VersionPolicy::Latest(1)
    }
}

/// `version_policy` as written, in either spelling.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionPolicyKeys {
    #[serde(default)]
    latest: Option<Latest>,
    #[serde(default)]
    all: Option<All>,
    #[serde(default)]
    specific: Option<Specific>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Latest {
    Short(i64),
    Triton { num_versions: i64 },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum All {
    Short(bool),
    Triton {},
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Specific {
    Short(Vec<i64>),
    Triton { versions: Vec<i64> },
}

impl VersionPolicyKeys {
    /// The policy these keys give, or what is wrong with them.
    pub fn policy(&self) -> Result<VersionPolicy, String> {
        let given = [
            self.latest.is_some(),
            self.all.is_some(),
            self.specific.is_some(),
        ];
        if given.iter().filter(|&&g| g).count() != 1 {
            return Err("version_policy takes exactly one of latest, all and specific".into());
        }
        match (&self.latest, &self.all, &self.specific) {
            (Some(Latest::Short(n) | Latest::Triton { num_versions: n }), _, _) => {
                if *n < 1 {
                    return Err(format!(
                        "version_policy latest is {n}; it must serve at least 1 version"
                    ));
                }
                Ok(VersionPolicy::Latest(
                    usize::try_from(*n).unwrap_or(usize::MAX),
                ))
            }
            (_, Some(All::Short(false)), _) => Err(
                "version_policy all = false serves nothing; use latest or specific instead".into(),
            ),
            (_, Some(_), _) => Ok(VersionPolicy::All),
            (_, _, Some(Specific::Short(v) | Specific::Triton { versions: v })) => {
                if v.is_empty() {
                    return Err("version_policy specific lists no version".into());
                }
                let mut versions = v
                    .iter()
                    .map(|&n| {
                        u64::try_from(n).map_err(|_| {
                            format!(
                                "version_policy specific lists {n}; versions are numbers from 0"
                            )
                        })
                    })
                    .collect::<Result<Vec<u64>, String>>()?;
                versions.sort_unstable();
                versions.dedup();
                Ok(VersionPolicy::Specific(versions))
            }
            _ => unreachable!("exactly one is given"),
        }
    }
}

/// The numbered version folders of a model folder, by number, ascending:
/// every subfolder whose name is all digits. Empty for the flat layout.
pub fn version_folders(folder: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut versions: Vec<(u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some((name.parse().ok()?, e.path()))
        })
        .collect();
    versions.sort();
    versions
}

/// The versions of `available` (ascending) that `policy` serves, or why
/// none can be.
pub fn select_versions(
    policy: &VersionPolicy,
    available: &[(u64, PathBuf)],
) -> Result<Vec<(u64, PathBuf)>, String> {
    let numbers = || {
        available
            .iter()
            .map(|(n, _)| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match policy {
        VersionPolicy::Latest(n) => Ok(available[available.len().saturating_sub(*n)..].to_vec()),
        VersionPolicy::All => Ok(available.to_vec()),
        VersionPolicy::Specific(wanted) => {
            let missing: Vec<String> = wanted
                .iter()
                .filter(|w| !available.iter().any(|(n, _)| n == *w))
                .map(u64::to_string)
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "version_policy specific lists version {} with no folder; the folders are {}",
                    missing.join(", "),
                    numbers()
                ));
            }
            Ok(available
                .iter()
                .filter(|(n, _)| wanted.contains(n))
                .cloned()
                .collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(toml: &str) -> Result<VersionPolicy, String> {
        let table: toml::Table = toml::from_str(toml).unwrap();
        let keys: VersionPolicyKeys = table
            .get("version_policy")
            .unwrap()
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| e.to_string())?;
        keys.policy()
    }

    #[test]
    fn both_spellings_parse() {
        for (short, triton, want) in [
            (
                "version_policy = { latest = 2 }",
                "version_policy = { latest = { num_versions = 2 } }",
                VersionPolicy::Latest(2),
            ),
            (
                "version_policy = { all = true }",
                "version_policy = { all = {} }",
                VersionPolicy::All,
            ),
            (
                "version_policy = { specific = [3, 1, 3] }",
                "version_policy = { specific = { versions = [3, 1] } }",
                VersionPolicy::Specific(vec![1, 3]),
            ),
        ] {
            assert_eq!(keys(short).unwrap(), want, "{short}");
            assert_eq!(keys(triton).unwrap(), want, "{triton}");
        }
    }

    #[test]
    fn bad_policies_say_why() {
        for (toml, says) in [
            ("version_policy = {}", "exactly one"),
            ("version_policy = { latest = 1, all = true }", "exactly one"),
            ("version_policy = { latest = 0 }", "at least 1"),
            ("version_policy = { all = false }", "serves nothing"),
            ("version_policy = { specific = [] }", "no version"),
            ("version_policy = { specific = [-1] }", "-1"),
            ("version_policy = { newest = 1 }", "newest"),
        ] {
            let e = keys(toml).unwrap_err();
            assert!(e.contains(says), "{toml}: {e}");
        }
    }

    #[test]
    fn policies_select_versions() {
        let available: Vec<(u64, PathBuf)> = [1, 2, 10]
            .iter()
            .map(|&n| (n, PathBuf::from(n.to_string())))
            .collect();
        let numbers = |p: &VersionPolicy| -> Vec<u64> {
            select_versions(p, &available)
                .unwrap()
                .iter()
                .map(|(n, _)| *n)
                .collect()
        };
        assert_eq!(numbers(&VersionPolicy::default()), [10]);
        assert_eq!(numbers(&VersionPolicy::Latest(2)), [2, 10]);
        assert_eq!(numbers(&VersionPolicy::Latest(9)), [1, 2, 10]);
        assert_eq!(numbers(&VersionPolicy::All), [1, 2, 10]);
        assert_eq!(numbers(&VersionPolicy::Specific(vec![1, 10])), [1, 10]);
        let e = select_versions(&VersionPolicy::Specific(vec![1, 3]), &available).unwrap_err();
        assert!(e.contains("version 3") && e.contains("1, 2, 10"), "{e}");
    }
}
