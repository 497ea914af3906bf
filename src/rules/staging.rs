//! The staging-root marker rule: whether a directory given as a store's staging root is that
//! store's.
//!
//! A store records a staging identity (random, made when the store is created) in its meta
//! record; its staging root holds a marker file naming the same identity. Cleanup deletes
//! files under the root, so a root given by mistake (the parent of the real one, a user's
//! folder) must be refused before anything is written or deleted there. Pure: the store reads
//! the marker and whether the root is otherwise empty, this decides.

/// What the store found in the directory given as its staging root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MarkerSeen {
    /// No marker file.
    Absent,
    /// A marker naming this identity.
    Present(String),
    /// Something in the marker's place that is not a marker (why).
    Damaged(String),
}

/// What to do with the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RootAction {
    /// The marker matches: use the root.
    Use,
    /// The store's identity is recorded but the root is empty and unmarked (a new staging
    /// directory, or a creation interrupted before its marker was written): write the marker.
    WriteMarker,
    /// A new store takes this identity: the one of the marker already in an otherwise empty
    /// root (left by a creation interrupted before the store was linked into place), or a new
    /// one (`None`), and writes the marker if needed.
    Claim(Option<String>),
}

/// Decides about a root, given the identity the store records (`None` for a store being
/// created), the marker seen, and whether the root holds nothing besides the marker.
///
/// Invariant: a root holding anything but its marker is used only if its marker names the
/// store's identity; an unmarked, non-empty directory is never adopted, so neither an unrelated
/// folder nor the parent of a real root can become a staging root.
pub(crate) fn decide(recorded: Option<&str>, marker: &MarkerSeen, empty_but_marker: bool) -> Result<RootAction, String> {
    match (recorded, marker) {
        (_, MarkerSeen::Damaged(why)) => Err(format!("its staging-root marker is damaged ({why})")),
        (Some(recorded), MarkerSeen::Present(found)) if recorded == found => Ok(RootAction::Use),
        (Some(recorded), MarkerSeen::Present(found)) => {
            Err(format!("its marker names staging identity {found}, but this store's is {recorded} (the root of another store?)"))
        }
        (Some(_), MarkerSeen::Absent) if empty_but_marker => Ok(RootAction::WriteMarker),
        (Some(_), MarkerSeen::Absent) => Err(
            "it holds files but no staging-root marker, so it is not this store's staging root (the wrong --staging, or the parent of the real root?)"
                .to_owned(),
        ),
        (None, MarkerSeen::Present(found)) if empty_but_marker => Ok(RootAction::Claim(Some(found.clone()))),
        (None, MarkerSeen::Present(found)) => {
            Err(format!("it already is the staging root of another store (staging identity {found}); a new store needs its own"))
        }
        (None, MarkerSeen::Absent) if empty_but_marker => Ok(RootAction::Claim(None)),
        (None, MarkerSeen::Absent) => Err("a new store needs an empty (or missing) staging root, and this one holds files".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_matching_marker_or_an_empty_root_is_accepted() {
        let present = |id: &str| MarkerSeen::Present(id.to_owned());
        assert_eq!(decide(Some("a"), &present("a"), false), Ok(RootAction::Use));
        assert!(decide(Some("a"), &present("b"), false).is_err());
        assert!(decide(Some("a"), &present("b"), true).is_err(), "another store's marker is never overwritten");
        assert_eq!(decide(Some("a"), &MarkerSeen::Absent, true), Ok(RootAction::WriteMarker));
        assert!(decide(Some("a"), &MarkerSeen::Absent, false).is_err(), "an unmarked folder with files is refused");
        assert!(decide(Some("a"), &MarkerSeen::Damaged("x".into()), true).is_err());
        assert_eq!(decide(None, &MarkerSeen::Absent, true), Ok(RootAction::Claim(None)));
        assert_eq!(decide(None, &present("c"), true), Ok(RootAction::Claim(Some("c".into()))));
        assert!(decide(None, &present("c"), false).is_err());
        assert!(decide(None, &MarkerSeen::Absent, false).is_err());
    }
}
