//! Access control lists as the metadata log keeps them (Kafka's `AclBinding`: a
//! resource pattern and an access control entry), the filters that select them
//! (DescribeAcls, DeleteAcls), and the one decision made from them — may a principal,
//! connecting from a host, perform an operation on a resource (Kafka's
//! `StandardAuthorizer`):
//!
//! 1. a super user may do anything;
//! 2. the ACLs that apply to the resource are its LITERAL ones, the LITERAL `*`
//!    wildcard of its type, and every PREFIXED one whose name begins the resource's
//!    name; of those, an entry counts when its principal is the principal or `User:*`
//!    and its host is the host or `*`;
//! 3. a DENY entry for the operation (or ALL) refuses, whatever allows;
//! 4. else an ALLOW entry for the operation, for ALL, or for an operation that implies
//!    it (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
//!    DESCRIBE_CONFIGS) allows;
//! 5. else, when no ACL at all applies to the resource (whoever it names),
//!    `allow.everyone.if.no.acl.found` decides; otherwise the answer is no.
//!
//! Invariants: every stored binding is definite — a resource type, LITERAL or
//! PREFIXED, a non-empty name, a `Type:name` principal, an operation other than ANY, and
//! ALLOW or DENY (`AclBinding::validate`, checked at the edge before a command is
//! proposed; applying is total); the lookup index is always exactly the stored set
//! (rebuilt whenever the set changes, and after a snapshot is loaded); decisions and
//! matches depend on the set alone, and the set iterates in one order, so applying
//! DeleteAcls is deterministic.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// The name a CLUSTER resource always has.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The resource name and the principal that stand for every one.
pub const WILDCARD: &str = "*";
pub const WILDCARD_PRINCIPAL: &str = "User:*";

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($variant:ident = $code:literal),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($variant),*
        }

        impl $name {
            /// `None` for Kafka's UNKNOWN (0) and any code it does not define.
            pub fn from_wire(code: i8) -> Option<$name> {
                match code {
                    $($code => Some($name::$variant),)*
                    _ => None,
                }
            }

            pub fn wire(self) -> i8 {
                match self {
                    $($name::$variant => $code),*
                }
            }
        }
    };
}

wire_enum!(
    /// Kafka's `ResourceType`.
    ResourceType {
        Any = 1,
        Topic = 2,
        Group = 3,
        Cluster = 4,
        TransactionalId = 5,
        DelegationToken = 6,
        User = 7,
    }
);

wire_enum!(
    /// Kafka's `PatternType`: ANY and MATCH are for filters only.
    PatternType {
        Any = 1,
        Match = 2,
        Literal = 3,
        Prefixed = 4,
    }
);

wire_enum!(
    /// Kafka's `AclOperation`.
    AclOperation {
        Any = 1,
        All = 2,
        Read = 3,
        Write = 4,
        Create = 5,
        Delete = 6,
        Alter = 7,
        Describe = 8,
        ClusterAction = 9,
        DescribeConfigs = 10,
        AlterConfigs = 11,
        IdempotentWrite = 12,
        CreateTokens = 13,
        DescribeTokens = 14,
    }
);

wire_enum!(
    /// Kafka's `AclPermissionType`: ANY is for filters only.
    AclPermission {
        Any = 1,
        Deny = 2,
        Allow = 3,
    }
);

impl AclOperation {
    /// Whether an ALLOW entry for `self` allows `requested` (Kafka's implications).
    fn allows(self, requested: AclOperation) -> bool {
        use AclOperation::*;
        self == All
            || self == requested
            || (requested == Describe && matches!(self, Read | Write | Delete | Alter))
            || (requested == DescribeConfigs && self == AlterConfigs)
    }

    /// Whether a DENY entry for `self` refuses `requested` (no implications: denying READ
    /// does not deny DESCRIBE).
    fn denies(self, requested: AclOperation) -> bool {
        self == AclOperation::All || self == requested
    }
}

/// Why an ACL or a filter was refused (INVALID_REQUEST, with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidAcl(pub String);

/// One ACL: who may (or may not) do what to which resources.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    /// `Type:name`, e.g. `User:alice`; `User:*` is every principal.
    pub principal: String,
    /// An address as the broker sees the client's, or `*`.
    pub host: String,
    pub operation: AclOperation,
    pub permission: AclPermission,
}

impl AclBinding {
    /// From CreateAcls' wire fields: `None` in a field is a code Kafka calls UNKNOWN.
    /// Kafka's checks and messages (`AclControlManager.validateNewAcl`, `AclApis`).
    #[allow(clippy::too_many_arguments)]
    pub fn validate(
        resource_type: Option<ResourceType>,
        resource_name: &str,
        pattern_type: Option<PatternType>,
        principal: &str,
        host: &str,
        operation: Option<AclOperation>,
        permission: Option<AclPermission>,
    ) -> Result<AclBinding, InvalidAcl> {
        let resource_type = match resource_type {
            Some(ResourceType::Any) | None => {
                return Err(InvalidAcl("Invalid resourceType".into()));
            }
            Some(t) => t,
        };
        let pattern_type = match pattern_type {
            Some(p @ (PatternType::Literal | PatternType::Prefixed)) => p,
            _ => return Err(InvalidAcl("Invalid patternType".into())),
        };
        let operation = match operation {
            Some(AclOperation::Any) | None => return Err(InvalidAcl("Invalid operation".into())),
            Some(o) => o,
        };
        let permission = match permission {
            Some(p @ (AclPermission::Allow | AclPermission::Deny)) => p,
            _ => return Err(InvalidAcl("Invalid permissionType".into())),
        };
        if resource_name.is_empty() {
            return Err(InvalidAcl("Invalid empty resource name".into()));
        }
        if resource_type == ResourceType::Cluster && resource_name != CLUSTER_NAME {
            return Err(InvalidAcl(format!(
                "The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
            )));
        }
        match principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => {
                return Err(InvalidAcl(format!(
                    "Could not parse principal from `{principal}` (no colon is present \
                     separating the principal type from the principal name)"
                )));
            }
        }
        if host.is_empty() {
            return Err(InvalidAcl("Invalid empty host".into()));
        }
        Ok(AclBinding {
            resource_type,
            resource_name: resource_name.to_string(),
            pattern_type,
            principal: principal.to_string(),
            host: host.to_string(),
            operation,
            permission,
        })
    }
}

/// Selects ACLs (DescribeAcls, DeleteAcls): `None` names and ANY codes match anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclFilter {
    pub resource_type: ResourceType,
    pub resource_name: Option<String>,
    pub pattern_type: PatternType,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: AclOperation,
    pub permission: AclPermission,
}

impl AclFilter {
    /// From the wire fields; a field Kafka calls UNKNOWN makes the filter invalid.
    #[allow(clippy::too_many_arguments)]
    pub fn validate(
        resource_type: Option<ResourceType>,
        resource_name: Option<&str>,
        pattern_type: Option<PatternType>,
        principal: Option<&str>,
        host: Option<&str>,
        operation: Option<AclOperation>,
        permission: Option<AclPermission>,
    ) -> Result<AclFilter, InvalidAcl> {
        let (Some(resource_type), Some(pattern_type)) = (resource_type, pattern_type) else {
            return Err(InvalidAcl("Unknown patternFilter.".into()));
        };
        let (Some(operation), Some(permission)) = (operation, permission) else {
            return Err(InvalidAcl("Unknown entryFilter.".into()));
        };
        Ok(AclFilter {
            resource_type,
            resource_name: resource_name.map(str::to_string),
            pattern_type,
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation,
            permission,
        })
    }

    /// Kafka's `AclBindingFilter.matches`. A MATCH filter with a name selects the ACLs
    /// that would apply to a resource of that name: its LITERAL ones, the LITERAL
    /// wildcard and the PREFIXED ones that begin it.
    pub fn matches(&self, b: &AclBinding) -> bool {
        if self.resource_type != ResourceType::Any && self.resource_type != b.resource_type {
            return false;
        }
        if !matches!(self.pattern_type, PatternType::Any | PatternType::Match)
            && self.pattern_type != b.pattern_type
        {
            return false;
        }
        let name_matches = match &self.resource_name {
            None => true,
            Some(name) if matches!(self.pattern_type, PatternType::Any) => *name == b.resource_name,
            Some(name) if self.pattern_type == b.pattern_type => *name == b.resource_name,
            Some(name) => match b.pattern_type {
                PatternType::Literal => *name == b.resource_name || b.resource_name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&b.resource_name),
                PatternType::Any | PatternType::Match => false,
            },
        };
        name_matches
            && self.principal.as_ref().is_none_or(|p| *p == b.principal)
            && self.host.as_ref().is_none_or(|h| *h == b.host)
            && (self.operation == AclOperation::Any || self.operation == b.operation)
            && (self.permission == AclPermission::Any || self.permission == b.permission)
    }
}

/// The authorizer's settings: Kafka's `super.users` and `allow.everyone.if.no.acl.found`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuthorizerPolicy {
    pub super_users: Vec<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerPolicy {
    pub fn is_super_user(&self, principal: &str) -> bool {
        self.super_users.iter().any(|u| u == principal)
    }
}

/// Who asks: the principal (`User:alice`, `User:ANONYMOUS`) and the client's address.
#[derive(Debug, Clone, Copy)]
pub struct Requester<'a> {
    pub principal: &'a str,
    pub host: &'a str,
}

/// One ACL's entry as the index keeps it, under its resource pattern.
#[derive(Debug, Clone)]
struct Entry {
    principal: String,
    host: String,
    operation: AclOperation,
    permission: AclPermission,
}

impl Entry {
    fn names(&self, who: Requester<'_>) -> bool {
        (self.principal == who.principal || self.principal == WILDCARD_PRINCIPAL)
            && (self.host == who.host || self.host == WILDCARD)
    }
}

/// One resource type's ACLs by pattern.
#[derive(Debug, Clone, Default)]
struct TypeIndex {
    literal: HashMap<String, Vec<Entry>>,
    prefixed: HashMap<String, Vec<Entry>>,
    /// The byte lengths of the PREFIXED names, so a lookup tries only those.
    prefix_lengths: BTreeSet<usize>,
}

impl TypeIndex {
    /// Every entry that applies to a resource named `name`.
    fn applying<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        let literal = self.literal.get(name).into_iter().flatten();
        let wildcard = (name != WILDCARD)
            .then(|| self.literal.get(WILDCARD))
            .flatten()
            .into_iter()
            .flatten();
        let prefixed = self
            .prefix_lengths
            .iter()
            .take_while(move |len| **len <= name.len())
            .filter_map(move |len| name.get(..*len))
            .filter_map(|prefix| self.prefixed.get(prefix))
            .flatten();
        literal.chain(wildcard).chain(prefixed)
    }
}

#[derive(Debug, Default)]
struct AclSet {
    bindings: BTreeSet<AclBinding>,
    index: HashMap<ResourceType, TypeIndex>,
}

impl AclSet {
    fn from_bindings(bindings: BTreeSet<AclBinding>) -> AclSet {
        let mut index: HashMap<ResourceType, TypeIndex> = HashMap::new();
        for b in &bindings {
            let t = index.entry(b.resource_type).or_default();
            let entry = Entry {
                principal: b.principal.clone(),
                host: b.host.clone(),
                operation: b.operation,
                permission: b.permission,
            };
            match b.pattern_type {
                PatternType::Literal => t
                    .literal
                    .entry(b.resource_name.clone())
                    .or_default()
                    .push(entry),
                PatternType::Prefixed => {
                    t.prefix_lengths.insert(b.resource_name.len());
                    t.prefixed
                        .entry(b.resource_name.clone())
                        .or_default()
                        .push(entry)
                }
                PatternType::Any | PatternType::Match => {
                    debug_assert!(false, "a stored ACL is LITERAL or PREFIXED: {b:?}")
                }
            }
        }
        AclSet { bindings, index }
    }
}

/// Every ACL, with the index decisions are made from. Cheap to clone (images are cloned
/// on every change).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(from = "Vec<AclBinding>", into = "Vec<AclBinding>")]
pub struct Acls {
    set: Arc<AclSet>,
}

impl From<Vec<AclBinding>> for Acls {
    fn from(v: Vec<AclBinding>) -> Acls {
        Acls {
            set: Arc::new(AclSet::from_bindings(v.into_iter().collect())),
        }
    }
}

impl From<Acls> for Vec<AclBinding> {
    fn from(a: Acls) -> Vec<AclBinding> {
        a.set.bindings.iter().cloned().collect()
    }
}

impl PartialEq for Acls {
    fn eq(&self, other: &Acls) -> bool {
        self.set.bindings == other.set.bindings
    }
}

impl Acls {
    pub fn len(&self) -> usize {
        self.set.bindings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.bindings.is_empty()
    }

    /// Every ACL, in one fixed order.
    pub fn iter(&self) -> impl Iterator<Item = &AclBinding> {
        self.set.bindings.iter()
    }

    /// The ACLs `filter` selects, in order.
    pub fn matching<'a>(&'a self, filter: &'a AclFilter) -> impl Iterator<Item = &'a AclBinding> {
        self.iter().filter(|b| filter.matches(b))
    }

    /// Adds `bindings` (one already present stays once).
    pub fn create(&mut self, bindings: &[AclBinding]) {
        if bindings.iter().all(|b| self.set.bindings.contains(b)) {
            return;
        }
        let mut all = self.set.bindings.clone();
        all.extend(bindings.iter().cloned());
        self.set = Arc::new(AclSet::from_bindings(all));
    }

    /// Removes every ACL any of `filters` selects; per filter, the ACLs it selected
    /// (each filter is matched against the set as it was before the request, as Kafka's
    /// `AclControlManager` does, so one ACL may be reported under several filters).
    pub fn delete(&mut self, filters: &[AclFilter]) -> Vec<Vec<AclBinding>> {
        let per_filter: Vec<Vec<AclBinding>> = filters
            .iter()
            .map(|f| self.matching(f).cloned().collect())
            .collect();
        if per_filter.iter().any(|m| !m.is_empty()) {
            let gone: BTreeSet<&AclBinding> = per_filter.iter().flatten().collect();
            let kept = self
                .set
                .bindings
                .iter()
                .filter(|b| !gone.contains(b))
                .cloned()
                .collect();
            self.set = Arc::new(AclSet::from_bindings(kept));
        }
        per_filter
    }

    /// Whether `who` may perform `op` on the resource `(resource_type, name)`: the
    /// rules in the module comment.
    pub fn authorize(
        &self,
        policy: &AuthorizerPolicy,
        who: Requester<'_>,
        op: AclOperation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        debug_assert!(
            !matches!(op, AclOperation::Any | AclOperation::All),
            "a request asks for one operation"
        );
        if policy.is_super_user(who.principal) {
            return true;
        }
        let Some(index) = self.set.index.get(&resource_type) else {
            return policy.allow_everyone_if_no_acl_found;
        };
        let mut any_acl = false;
        let mut allowed = false;
        for e in index.applying(name) {
            any_acl = true;
            if !e.names(who) {
                continue;
            }
            match e.permission {
                AclPermission::Deny if e.operation.denies(op) => return false,
                AclPermission::Allow if e.operation.allows(op) => allowed = true,
                _ => {}
            }
        }
        allowed || (!any_acl && policy.allow_everyone_if_no_acl_found)
    }

    /// Whether `who` may perform `op` on some resource of `resource_type` (Kafka's
    /// `authorizeByResourceType`, used where any one topic's WRITE suffices): an ALLOW
    /// for `who` on a LITERAL name or a PREFIXED pattern that no DENY for `who` covers
    /// (the same literal name, a prefix of it, or the wildcard).
    pub fn authorize_any(
        &self,
        policy: &AuthorizerPolicy,
        who: Requester<'_>,
        op: AclOperation,
        resource_type: ResourceType,
    ) -> bool {
        if policy.is_super_user(who.principal) {
            return true;
        }
        let Some(index) = self.set.index.get(&resource_type) else {
            return policy.allow_everyone_if_no_acl_found;
        };
        let denies = |entries: &Vec<Entry>| {
            entries.iter().any(|e| {
                e.names(who) && e.permission == AclPermission::Deny && e.operation.denies(op)
            })
        };
        let allows = |entries: &Vec<Entry>| {
            entries.iter().any(|e| {
                e.names(who) && e.permission == AclPermission::Allow && e.operation.allows(op)
            })
        };
        if index.literal.get(WILDCARD).is_some_and(denies) {
            return false;
        }
        let denied_prefixes: Vec<&str> = index
            .prefixed
            .iter()
            .filter(|(_, entries)| denies(entries))
            .map(|(p, _)| p.as_str())
            .collect();
        let covered = |name: &str| denied_prefixes.iter().any(|p| name.starts_with(p));
        let literal_allowed = index
            .literal
            .iter()
            .any(|(name, entries)| allows(entries) && !denies(entries) && !covered(name));
        let prefix_allowed = index
            .prefixed
            .iter()
            .any(|(name, entries)| allows(entries) && !covered(name));
        literal_allowed || prefix_allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AclOperation::{
        All, Alter, AlterConfigs, Create, Delete, Describe, DescribeConfigs, IdempotentWrite, Read,
        Write,
    };
    use ResourceType::{Cluster, Group, Topic};

    fn acl(
        t: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        host: &str,
        op: AclOperation,
        permission: AclPermission,
    ) -> AclBinding {
        AclBinding::validate(
            Some(t),
            name,
            Some(pattern),
            principal,
            host,
            Some(op),
            Some(permission),
        )
        .expect("a valid ACL")
    }

    fn allow(
        t: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: AclOperation,
    ) -> AclBinding {
        acl(t, name, pattern, principal, "*", op, AclPermission::Allow)
    }

    fn deny(
        t: ResourceType,
        name: &str,
        pattern: PatternType,
        principal: &str,
        op: AclOperation,
    ) -> AclBinding {
        acl(t, name, pattern, principal, "*", op, AclPermission::Deny)
    }

    const ALICE: Requester<'static> = Requester {
        principal: "User:alice",
        host: "10.0.0.1",
    };
    const BOB: Requester<'static> = Requester {
        principal: "User:bob",
        host: "10.0.0.2",
    };

    fn strict() -> AuthorizerPolicy {
        AuthorizerPolicy::default()
    }

    fn acls(v: Vec<AclBinding>) -> Acls {
        Acls::from(v)
    }

    #[test]
    fn nothing_is_allowed_without_an_acl_unless_the_policy_says_so() {
        let a = Acls::default();
        assert!(!a.authorize(&strict(), ALICE, Read, Topic, "t"));
        let open = AuthorizerPolicy {
            allow_everyone_if_no_acl_found: true,
            ..strict()
        };
        assert!(a.authorize(&open, ALICE, Read, Topic, "t"));
        // An ACL on the resource for someone else means the default no longer applies.
        let a = acls(vec![allow(
            Topic,
            "t",
            PatternType::Literal,
            "User:bob",
            Read,
        )]);
        assert!(!a.authorize(&open, ALICE, Read, Topic, "t"));
        assert!(a.authorize(&open, ALICE, Read, Topic, "other"));
        assert!(a.authorize(&open, BOB, Read, Topic, "t"));
    }

    #[test]
    fn super_users_pass_everything_even_a_deny() {
        let a = acls(vec![deny(Topic, "*", PatternType::Literal, "User:*", All)]);
        let policy = AuthorizerPolicy {
            super_users: vec!["User:admin".into()],
            ..strict()
        };
        let admin = Requester {
            principal: "User:admin",
            host: "h",
        };
        assert!(a.authorize(&policy, admin, Write, Topic, "t"));
        assert!(a.authorize_any(&policy, admin, Write, Topic));
        assert!(!a.authorize(&policy, ALICE, Write, Topic, "t"));
    }

    #[test]
    fn read_write_delete_alter_imply_describe_and_alter_configs_implies_describe_configs() {
        for op in [Read, Write, Delete, Alter] {
            let a = acls(vec![allow(
                Topic,
                "t",
                PatternType::Literal,
                "User:alice",
                op,
            )]);
            assert!(
                a.authorize(&strict(), ALICE, Describe, Topic, "t"),
                "{op:?}"
            );
            assert!(!a.authorize(&strict(), ALICE, Create, Topic, "t"), "{op:?}");
        }
        let a = acls(vec![allow(
            Topic,
            "t",
            PatternType::Literal,
            "User:alice",
            AlterConfigs,
        )]);
        assert!(a.authorize(&strict(), ALICE, DescribeConfigs, Topic, "t"));
        assert!(!a.authorize(&strict(), ALICE, Describe, Topic, "t"));
        let a = acls(vec![allow(
            Topic,
            "t",
            PatternType::Literal,
            "User:alice",
            All,
        )]);
        assert!(a.authorize(&strict(), ALICE, IdempotentWrite, Topic, "t"));
    }

    #[test]
    fn deny_beats_allow_and_implies_nothing() {
        let a = acls(vec![
            allow(Topic, "t", PatternType::Literal, "User:*", All),
            deny(Topic, "t", PatternType::Prefixed, "User:alice", Read),
        ]);
        assert!(!a.authorize(&strict(), ALICE, Read, Topic, "t"));
        // Denying READ leaves DESCRIBE (allowed by ALL) alone.
        assert!(a.authorize(&strict(), ALICE, Describe, Topic, "t"));
        assert!(a.authorize(&strict(), BOB, Read, Topic, "t"));
        let a = acls(vec![
            allow(Topic, "t", PatternType::Literal, "User:alice", Read),
            deny(Topic, "*", PatternType::Literal, "User:*", All),
        ]);
        assert!(!a.authorize(&strict(), ALICE, Read, Topic, "t"));
    }

    #[test]
    fn prefixed_and_wildcard_patterns_cover_names_not_yet_created() {
        let a = acls(vec![
            allow(Topic, "orders-", PatternType::Prefixed, "User:alice", Write),
            allow(Group, "*", PatternType::Literal, "User:alice", Read),
        ]);
        assert!(a.authorize(&strict(), ALICE, Write, Topic, "orders-eu"));
        assert!(a.authorize(&strict(), ALICE, Write, Topic, "orders-"));
        assert!(!a.authorize(&strict(), ALICE, Write, Topic, "orders"));
        assert!(!a.authorize(&strict(), ALICE, Write, Topic, "ord"));
        assert!(a.authorize(&strict(), ALICE, Read, Group, "any-group"));
        // The wildcard is only a LITERAL "*": a PREFIXED "*" covers names starting with '*'.
        let a = acls(vec![allow(
            Topic,
            "*",
            PatternType::Prefixed,
            "User:alice",
            Read,
        )]);
        assert!(!a.authorize(&strict(), ALICE, Read, Topic, "t"));
        assert!(a.authorize(&strict(), ALICE, Read, Topic, "*t"));
        // A prefix never splits a character.
        let a = acls(vec![allow(
            Topic,
            "é",
            PatternType::Prefixed,
            "User:alice",
            Read,
        )]);
        assert!(a.authorize(&strict(), ALICE, Read, Topic, "été"));
        assert!(!a.authorize(&strict(), ALICE, Read, Topic, "e"));
    }

    #[test]
    fn hosts_and_the_wildcard_principal() {
        let a = acls(vec![acl(
            Topic,
            "t",
            PatternType::Literal,
            "User:*",
            "10.0.0.1",
            Read,
            AclPermission::Allow,
        )]);
        assert!(a.authorize(&strict(), ALICE, Read, Topic, "t"));
        assert!(
            !a.authorize(&strict(), BOB, Read, Topic, "t"),
            "another host"
        );
        // Resource types are separate.
        assert!(!a.authorize(&strict(), ALICE, Read, Group, "t"));
    }

    #[test]
    fn any_resource_of_a_type_unless_a_deny_covers_it() {
        let a = acls(vec![allow(
            Topic,
            "t",
            PatternType::Literal,
            "User:alice",
            Write,
        )]);
        assert!(a.authorize_any(&strict(), ALICE, Write, Topic));
        assert!(!a.authorize_any(&strict(), BOB, Write, Topic));
        let a = acls(vec![
            allow(Topic, "t", PatternType::Literal, "User:alice", Write),
            deny(Topic, "t", PatternType::Prefixed, "User:alice", Write),
        ]);
        assert!(!a.authorize_any(&strict(), ALICE, Write, Topic));
        let a = acls(vec![
            allow(Topic, "logs-", PatternType::Prefixed, "User:alice", Write),
            deny(Topic, "*", PatternType::Literal, "User:*", Write),
        ]);
        assert!(!a.authorize_any(&strict(), ALICE, Write, Topic));
    }

    #[test]
    fn filters_select_as_kafkas_do() {
        let lit = allow(Topic, "orders", PatternType::Literal, "User:alice", Read);
        let wild = allow(Topic, "*", PatternType::Literal, "User:bob", Write);
        let pre = allow(Topic, "ord", PatternType::Prefixed, "User:alice", Read);
        let grp = allow(Group, "orders", PatternType::Literal, "User:alice", Read);
        let set = acls(vec![lit.clone(), wild.clone(), pre.clone(), grp.clone()]);
        let filter = |t, name: Option<&str>, p, principal: Option<&str>| {
            AclFilter::validate(
                Some(t),
                name,
                Some(p),
                principal,
                None,
                Some(AclOperation::Any),
                Some(AclPermission::Any),
            )
            .expect("a valid filter")
        };
        let got = |f: AclFilter| set.matching(&f).cloned().collect::<BTreeSet<_>>();
        let of = |v: Vec<&AclBinding>| v.into_iter().cloned().collect::<BTreeSet<_>>();
        assert_eq!(
            got(filter(ResourceType::Any, None, PatternType::Any, None)).len(),
            4
        );
        assert_eq!(
            got(filter(Topic, Some("orders"), PatternType::Match, None)),
            of(vec![&lit, &wild, &pre])
        );
        assert_eq!(
            got(filter(Topic, Some("orders"), PatternType::Any, None)),
            of(vec![&lit])
        );
        assert_eq!(
            got(filter(Topic, Some("ord"), PatternType::Prefixed, None)),
            of(vec![&pre])
        );
        assert_eq!(
            got(filter(
                ResourceType::Any,
                None,
                PatternType::Any,
                Some("User:alice")
            )),
            of(vec![&lit, &pre, &grp])
        );
        assert!(AclFilter::validate(
            None,
            None,
            Some(PatternType::Any),
            None,
            None,
            Some(AclOperation::Any),
            Some(AclPermission::Any)
        )
        .is_err());
    }

    #[test]
    fn create_is_idempotent_and_delete_reports_per_filter() {
        let a1 = allow(Topic, "t", PatternType::Literal, "User:alice", Read);
        let a2 = allow(Topic, "u", PatternType::Literal, "User:alice", Read);
        let mut set = Acls::default();
        set.create(&[a1.clone(), a2.clone()]);
        set.create(std::slice::from_ref(&a1));
        assert_eq!(set.len(), 2);
        let by_t = AclFilter::validate(
            Some(Topic),
            Some("t"),
            Some(PatternType::Literal),
            None,
            None,
            Some(AclOperation::Any),
            Some(AclPermission::Any),
        )
        .expect("valid");
        let all = AclFilter::validate(
            Some(ResourceType::Any),
            None,
            Some(PatternType::Any),
            None,
            None,
            Some(AclOperation::Any),
            Some(AclPermission::Any),
        )
        .expect("valid");
        let deleted = set.delete(&[by_t, all]);
        assert_eq!(deleted, vec![vec![a1.clone()], vec![a1, a2]]);
        assert!(set.is_empty());
        assert!(
            !set.authorize(&strict(), ALICE, Read, Topic, "u"),
            "the index follows the set"
        );
    }

    #[test]
    fn invalid_acls_are_refused_with_kafkas_messages() {
        let v = |t, name: &str, p, principal: &str, op, perm| {
            AclBinding::validate(t, name, p, principal, "*", op, perm).map_err(|e| e.0)
        };
        let ok = (
            Some(Topic),
            Some(PatternType::Literal),
            Some(Read),
            Some(AclPermission::Allow),
        );
        assert!(v(ok.0, "t", ok.1, "User:a", ok.2, ok.3).is_ok());
        assert_eq!(
            v(Some(ResourceType::Any), "t", ok.1, "User:a", ok.2, ok.3),
            Err("Invalid resourceType".into())
        );
        assert_eq!(
            v(ok.0, "t", Some(PatternType::Match), "User:a", ok.2, ok.3),
            Err("Invalid patternType".into())
        );
        assert_eq!(
            v(ok.0, "t", ok.1, "User:a", Some(AclOperation::Any), ok.3),
            Err("Invalid operation".into())
        );
        assert_eq!(
            v(ok.0, "t", ok.1, "User:a", ok.2, None),
            Err("Invalid permissionType".into())
        );
        assert!(v(ok.0, "", ok.1, "User:a", ok.2, ok.3).is_err());
        assert!(v(ok.0, "t", ok.1, "alice", ok.2, ok.3)
            .unwrap_err()
            .contains("no colon"));
        assert!(v(Some(Cluster), "c", ok.1, "User:a", ok.2, ok.3)
            .unwrap_err()
            .contains("kafka-cluster"));
    }

    #[test]
    fn acls_survive_a_snapshot_round_trip_with_their_index() {
        let a = acls(vec![allow(
            Topic,
            "p-",
            PatternType::Prefixed,
            "User:alice",
            Read,
        )]);
        let json = serde_json::to_string(&a).expect("serialize");
        let back: Acls = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, a);
        assert!(back.authorize(&strict(), ALICE, Read, Topic, "p-1"));
    }
}
