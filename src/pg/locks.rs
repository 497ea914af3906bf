//! How read-write transactions on PostgreSQL stay serializable: strict two-phase locking over a
//! tree of names, with PostgreSQL's transaction-level advisory locks, at READ COMMITTED.
//!
//! ## The tree
//! Every record of the store belongs to one node (its *own* records):
//!
//! ```text
//! Store                        the format and views records, cleanup plans and batches
//! ├── Dataset(d)               (none: the node that covers everything of d)
//! │   ├── Head(d)              d's pointer, generations, partition versions, published digests
//! │   └── Run(d, r)            the run's record
//! │       ├── Task(d, r, p)    the task's record, its attempts, its accepted entry
//! │       └── Effect(d, r, e, p)  the side effect's record
//! ```
//!
//! An access is a read of a node's own records ([`Access::Read`]), a write of them
//! ([`Access::Write`]), or a read or write below a node that names no single child (a scan of
//! a run's tasks, of every attempt of the store: [`Access::Below`]).
//!
//! ## The rule ([`Held::covers`])
//! A node is locked shared or exclusive, and only after each of its ancestors is locked (at
//! least shared). An exclusive lock on a node covers every access to it and to everything
//! below it; a shared lock on a node covers reading its own records and nothing below it (it
//! is what a descendant's lock stands on). So two transactions whose accesses conflict (one
//! writes what the other reads or writes) hold conflicting locks: their accesses meet at some
//! node, where one holds it exclusive (a write, or anything below) and the other holds it or
//! an ancestor in some mode, or one holds an ancestor exclusive and the other holds that
//! ancestor shared on the way down.
//!
//! ## Why the schedule is serializable
//! [`super::meta::PgMeta`] checks every read and write of a read-write transaction against
//! the locks it holds and, before the statement runs, takes what is missing. Operations declare
//! their [`Scope`] first so that the usual locks come in one round trip and in one order, but
//! the check does not trust the declaration: an access outside it locks as it goes. Locks are
//! only released when the transaction ends (advisory `_xact_` locks). This is strict two-phase
//! locking, so conflicting transactions are ordered by their commits. Each statement at READ
//! COMMITTED reads what was committed before it began; every record it reads is covered by a
//! lock this transaction already holds, so no other transaction has written it since it was
//! locked, and every transaction that wrote it before committed before releasing its lock (a
//! lock is released after the commit became visible). So each read returns the value of the
//! last committed writer in lock order, which is what a serial run in commit order would
//! return. Readers of absent keys are covered the same way, since an advisory lock names a key
//! whether or not a row exists (no phantoms). Read-only snapshots (REPEATABLE READ) see a
//! prefix of the commit order, hence a state of that serial run.
//!
//! Costs, not correctness: a deadlock (two operations locking in different orders, as a batch
//! of many operations may) is detected by the server and the operation runs again; two nodes
//! whose names hash to one lock key only wait for each other more often; past [`LOCKS_MAX`]
//! locks in one transaction, the next lock is the store's exclusive one, which covers the rest.

use std::collections::HashMap;

use crate::meta::Scope;
use crate::model::{AttemptKey, EffectKey, TaskKey};

/// The most advisory locks one transaction takes; past it the store is locked exclusive
/// instead (PostgreSQL's shared lock table holds `max_locks_per_transaction` per connection
/// on average, 64 by default).
pub(crate) const LOCKS_MAX: usize = 48;

/// A node of the tree.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Node {
    Store,
    Dataset(String),
    Head(String),
    Run(String, String),
    Task(String, String, String),
    Effect(String, String, String, String),
}

/// How a node is locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Mode {
    Shared,
    Exclusive,
}

/// What a statement does to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Reads the node's own records.
    Read,
    /// Writes the node's own records.
    Write,
    /// Reads or writes records below the node (a scan over its children).
    Below,
}

impl Node {
    pub(crate) fn dataset(dataset: &str) -> Node {
        Node::Dataset(dataset.to_owned())
    }

    pub(crate) fn head(dataset: &str) -> Node {
        Node::Head(dataset.to_owned())
    }

    pub(crate) fn run(dataset: &str, run: &str) -> Node {
        Node::Run(dataset.to_owned(), run.to_owned())
    }

    pub(crate) fn task(task: &TaskKey) -> Node {
        Node::Task(task.dataset.clone(), task.run.clone(), task.partition.clone())
    }

    pub(crate) fn attempt(attempt: &AttemptKey) -> Node {
        Node::task(&attempt.task)
    }

    pub(crate) fn effect(effect: &EffectKey) -> Node {
        Node::Effect(effect.dataset.clone(), effect.run.clone(), effect.effect.clone(), effect.partition.clone().unwrap_or_default())
    }

    fn parent(&self) -> Option<Node> {
        match self {
            Node::Store => None,
            Node::Dataset(_) => Some(Node::Store),
            Node::Head(d) | Node::Run(d, _) => Some(Node::Dataset(d.clone())),
            Node::Task(d, r, _) | Node::Effect(d, r, _, _) => Some(Node::Run(d.clone(), r.clone())),
        }
    }

    /// The node's ancestors and itself, root first.
    fn path(&self) -> Vec<Node> {
        let mut out = vec![self.clone()];
        while let Some(parent) = out.last().and_then(Node::parent) {
            out.push(parent);
        }
        out.reverse();
        out
    }

    /// The advisory lock key of the node: two CRC-32s (fixed algorithm, so every build and
    /// host computes the same key) of its kind and names.
    pub(crate) fn lock_key(&self) -> i64 {
        let (kind, names): (u8, Vec<&str>) = match self {
            Node::Store => (0, vec![]),
            Node::Dataset(d) => (1, vec![d]),
            Node::Head(d) => (2, vec![d]),
            Node::Run(d, r) => (3, vec![d, r]),
            Node::Task(d, r, p) => (4, vec![d, r, p]),
            Node::Effect(d, r, e, p) => (5, vec![d, r, e, p]),
        };
        let mut bytes = b"manifestdb-lock".to_vec();
        bytes.push(kind);
        bytes.extend_from_slice(&crate::schema::key(&names));
        let mut high = crc32fast::Hasher::new_with_initial(0x6d66_7374);
        high.update(&bytes);
        let mut low = crc32fast::Hasher::new();
        low.update(&bytes);
        ((u64::from(high.finalize()) << 32) | u64::from(low.finalize())) as i64
    }
}

/// The locks one transaction holds.
#[derive(Debug, Default)]
pub(crate) struct Held {
    modes: HashMap<Node, Mode>,
}

impl Held {
    /// Whether the locks held cover `access` to `node` (the rule in the module's documentation).
    pub(crate) fn covers(&self, node: &Node, access: Access) -> bool {
        if node.path().iter().any(|n| self.modes.get(n) == Some(&Mode::Exclusive)) {
            return true;
        }
        access == Access::Read && self.modes.contains_key(node)
    }

    /// The locks to take, in order, so that the locks held cover `access` to `node`: each
    /// ancestor not yet held shared, then the node shared (a read) or exclusive. Nothing if
    /// they already cover it; the store exclusive if the transaction would hold more than
    /// [`LOCKS_MAX`].
    pub(crate) fn missing(&self, node: &Node, access: Access) -> Vec<(Node, Mode)> {
        if self.covers(node, access) {
            return Vec::new();
        }
        let mode = if access == Access::Read { Mode::Shared } else { Mode::Exclusive };
        let path = node.path();
        let last = path.len() - 1;
        let wanted: Vec<(Node, Mode)> = path
            .into_iter()
            .enumerate()
            .map(|(i, n)| (n, if i == last { mode } else { Mode::Shared }))
            .filter(|(n, m)| self.modes.get(n).is_none_or(|held| held < m))
            .collect();
        if self.modes.len() + wanted.len() > LOCKS_MAX {
            return vec![(Node::Store, Mode::Exclusive)];
        }
        wanted
    }

    /// The locks to take for `scope` (its accesses in the order above), merged.
    pub(crate) fn missing_for(&self, scope: Scope<'_>) -> Vec<(Node, Mode)> {
        let accesses: Vec<(Node, Access)> = match scope {
            Scope::Task(task) => vec![(Node::run(&task.dataset, &task.run), Access::Read), (Node::task(task), Access::Write)],
            Scope::Effect(effect) => {
                let mut out = vec![(Node::run(&effect.dataset, &effect.run), Access::Read)];
                if let Some(partition) = &effect.partition {
                    out.push((Node::task(&TaskKey::new(&effect.dataset, &effect.run, partition)), Access::Read));
                }
                out.push((Node::effect(effect), Access::Write));
                out
            }
            Scope::Run(dataset, run) => vec![(Node::run(dataset, run), Access::Below)],
            Scope::Publish(dataset, run) => vec![(Node::head(dataset), Access::Write), (Node::run(dataset, run), Access::Below)],
            Scope::Dataset(dataset) => vec![(Node::dataset(dataset), Access::Below)],
            Scope::Store => vec![(Node::Store, Access::Below)],
        };
        let mut planned = Held { modes: self.modes.clone() };
        let mut out = Vec::new();
        for (node, access) in accesses {
            let missing = planned.missing(&node, access);
            planned.record(&missing);
            out.extend(missing);
        }
        out
    }

    /// Records locks as taken.
    pub(crate) fn record(&mut self, taken: &[(Node, Mode)]) {
        for (node, mode) in taken {
            let held = self.modes.entry(node.clone()).or_insert(*mode);
            *held = (*held).max(*mode);
        }
    }

    /// How many nodes are locked.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.modes.len()
    }
}

/// One statement taking `locks` in order: `SELECT pg_advisory_xact_lock_shared($1),
/// pg_advisory_xact_lock($2), ...` (a select list is evaluated left to right).
pub(crate) fn statement(locks: &[(Node, Mode)]) -> String {
    let calls: Vec<String> = locks
        .iter()
        .enumerate()
        .map(|(i, (_, mode))| match mode {
            Mode::Shared => format!("pg_advisory_xact_lock_shared(${})", i + 1),
            Mode::Exclusive => format!("pg_advisory_xact_lock(${})", i + 1),
        })
        .collect();
    format!("SELECT {}", calls.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(p: &str) -> TaskKey {
        TaskKey::new("d", "r", p)
    }

    fn held(locks: &[(Node, Mode)]) -> Held {
        let mut held = Held::default();
        held.record(locks);
        held
    }

    #[test]
    fn a_task_scope_locks_its_ancestors_shared_and_the_task_exclusive_in_root_first_order() {
        let locks = Held::default().missing_for(Scope::Task(&task("p=1")));
        assert_eq!(
            locks,
            vec![
                (Node::Store, Mode::Shared),
                (Node::dataset("d"), Mode::Shared),
                (Node::run("d", "r"), Mode::Shared),
                (Node::task(&task("p=1")), Mode::Exclusive),
            ]
        );
        let held = held(&locks);
        assert!(held.covers(&Node::run("d", "r"), Access::Read), "the run's record is readable");
        assert!(!held.covers(&Node::run("d", "r"), Access::Write), "but not writable");
        assert!(!held.covers(&Node::run("d", "r"), Access::Below), "nor its other tasks");
        assert!(!held.covers(&Node::task(&task("p=2")), Access::Read), "another task is not covered");
        assert!(!held.covers(&Node::head("d"), Access::Read), "nor the dataset's pointer");
        assert!(held.covers(&Node::task(&task("p=1")), Access::Write));
    }

    #[test]
    fn locks_that_cover_conflicting_accesses_conflict() {
        // Every pair of scopes whose accesses conflict must hold one node in modes that
        // conflict (exclusive with anything); scopes on disjoint parts must not.
        let conflicts = |a: &[(Node, Mode)], b: &[(Node, Mode)]| {
            a.iter().any(|(n, m)| b.iter().any(|(o, k)| n == o && (*m == Mode::Exclusive || *k == Mode::Exclusive)))
        };
        let none = Held::default();
        let begin1 = none.missing_for(Scope::Task(&task("p=1")));
        let begin2 = none.missing_for(Scope::Task(&task("p=2")));
        let publish = none.missing_for(Scope::Publish("d", "r"));
        let publish_other_run = none.missing_for(Scope::Publish("d", "s"));
        let publish_other_dataset = none.missing_for(Scope::Publish("e", "r"));
        let declare = none.missing_for(Scope::Run("d", "r"));
        let cleanup = none.missing_for(Scope::Store);
        let effect = EffectKey { dataset: "d".into(), run: "r".into(), effect: "notify".into(), partition: Some("p=1".into()) };
        let claim = none.missing_for(Scope::Effect(&effect));
        assert!(!conflicts(&begin1, &begin2), "two tasks of one run go side by side");
        assert!(conflicts(&begin1, &publish), "a verdict and the run's publish are ordered");
        assert!(conflicts(&begin1, &declare));
        assert!(conflicts(&claim, &publish), "a publish makes the run's effects ready");
        assert!(conflicts(&claim, &begin1), "a claim reads the task a begin writes");
        assert!(conflicts(&publish, &publish_other_run), "two publishes of one dataset move one pointer");
        assert!(!conflicts(&publish, &publish_other_dataset), "two datasets publish side by side");
        assert!(!conflicts(&begin1, &publish_other_run), "a publish leaves the dataset's other runs' attempts alone");
        for scope in [&begin1, &publish, &declare, &claim] {
            assert!(conflicts(scope, &cleanup), "cleanup excludes every operation");
        }
    }

    #[test]
    fn an_exclusive_ancestor_covers_everything_below_and_a_shared_one_only_its_own_records() {
        let held = held(&[(Node::Store, Mode::Shared), (Node::dataset("d"), Mode::Exclusive)]);
        assert!(held.covers(&Node::task(&task("p=9")), Access::Write));
        assert!(held.covers(&Node::head("d"), Access::Write));
        assert!(!held.covers(&Node::head("e"), Access::Read));
        assert!(held.covers(&Node::Store, Access::Read));
        assert!(!held.covers(&Node::Store, Access::Write));
        assert!(held.missing(&Node::task(&task("p=9")), Access::Write).is_empty());
        // An access outside: the missing ancestors shared, the node as the access needs.
        assert_eq!(
            held.missing(&Node::run("e", "x"), Access::Read),
            vec![(Node::dataset("e"), Mode::Shared), (Node::run("e", "x"), Mode::Shared)]
        );
        // A shared lock held is upgraded when the access writes.
        let shared = self::held(&[(Node::Store, Mode::Shared)]);
        assert_eq!(shared.missing(&Node::Store, Access::Write), vec![(Node::Store, Mode::Exclusive)]);
    }

    #[test]
    fn past_the_lock_budget_the_store_is_locked_exclusive_and_covers_the_rest() {
        let mut held = Held::default();
        for i in 0..1000 {
            let missing = held.missing(&Node::task(&task(&format!("p={i}"))), Access::Write);
            held.record(&missing);
            assert!(held.len() <= LOCKS_MAX + 1, "{} locks after {i} tasks", held.len());
        }
        assert!(held.covers(&Node::head("anything"), Access::Write));
    }

    #[test]
    fn lock_keys_are_fixed_and_tell_nodes_apart() {
        // Fixed: another build or host computes the same key (a change here would let two
        // versions of manifestdb run side by side without excluding each other).
        // (Values computed independently: Python's `zlib.crc32(bytes, 0x6d667374) << 32 |
        // zlib.crc32(bytes)` as a signed 64-bit number.)
        assert_eq!(Node::Store.lock_key(), -7017978405292535770);
        assert_eq!(Node::task(&task("p=1")).lock_key(), -9083920563278081715);
        let keys: std::collections::HashSet<i64> = [
            Node::Store,
            Node::dataset("d"),
            Node::head("d"),
            Node::run("d", "r"),
            Node::task(&task("p=1")),
            Node::task(&task("p=2")),
            Node::Effect("d".into(), "r".into(), "e".into(), String::new()),
        ]
        .iter()
        .map(Node::lock_key)
        .collect();
        assert_eq!(keys.len(), 7);
    }

    #[test]
    fn the_statement_takes_each_lock_in_its_mode_in_order() {
        let sql = statement(&[(Node::Store, Mode::Shared), (Node::dataset("d"), Mode::Exclusive)]);
        assert_eq!(sql, "SELECT pg_advisory_xact_lock_shared($1), pg_advisory_xact_lock($2)");
    }
}
